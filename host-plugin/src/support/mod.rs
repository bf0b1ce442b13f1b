//! What every layer leans on and that leans on nothing of this crate: the launch rules'
//! plain types ([`launch_shape`]), diagnostics ([`diag`]), poison-free locks
//! (`locking`), which file this plugin is (`own_file`), huge pages for large buffers
//! (`huge_pages`) and a CPU prefetch (`prefetch`). A leaf folder: its modules import
//! nothing outside it (ELF reading, the other leaf, is [`crate::elf`], which imports
//! this one).

pub mod diag;
pub(crate) mod huge_pages;
pub mod launch_shape;
pub(crate) mod locking;
pub(crate) mod own_file;
pub(crate) mod prefetch;
