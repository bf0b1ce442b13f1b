//! The indirect function table family: the sorted host -> device table the device
//! searches ([`fptr`]), the index built beside it ([`fptr_index`]), the host-side index
//! built in place where device memory is this process's own ([`host_index`]), one
//! image's table as installed on a device ([`device_table`]), and the radix sort that
//! builds the table ([`radix`]).

pub mod device_table;
pub mod fptr;
pub mod fptr_index;
pub mod host_index;
pub mod radix;
