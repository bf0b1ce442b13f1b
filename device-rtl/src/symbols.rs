//! The names the device runtime exports: what the plugins look up in a device image,
//! what the compiler plugin calls, what the tools check images for. The items in lib.rs
//! carry these names (`#[no_mangle]`); every other part of the project takes the names
//! from here, and the image checks (xtask, tests/tests/device_link.rs) fail if an
//! artifact does not define them.
use core::ffi::CStr;

macro_rules! exported {
    ($(#[$doc:meta])* $name:ident, $c_name:ident = $symbol:literal) => {
        $(#[$doc])*
        pub const $name: &str = $symbol;
        /// The same name, NUL-terminated (dlsym, the drivers' global lookups).
        pub const $c_name: &CStr = match CStr::from_bytes_with_nul(concat!($symbol, "\0").as_bytes()) {
            Ok(name) => name,
            Err(_) => panic!("a symbol name has no interior NUL"),
        };
    };
}

exported!(
    /// The lookup: host function (or vtable word) address -> device address.
    LOOKUP, LOOKUP_C = "__kmpc_target_translate_fptr"
);
exported!(
    /// The device address of the sorted table.
    TABLE, TABLE_C = "__omp_offloading_fptr_map_p"
);
exported!(
    /// The number of rows in the table.
    TABLE_SIZE, TABLE_SIZE_C = "__omp_offloading_fptr_map_size"
);
exported!(
    /// The header of the table's index ([`crate::FptrIndex`]).
    INDEX, INDEX_C = "__omptarget_rs_fptr_index"
);

exported!(
    /// The table's head ([`crate::FptrHead`]): a small table's rows, or a larger one's
    /// key range.
    HEAD, HEAD_C = "__omptarget_rs_fptr_head"
);

/// Every symbol an artifact of the device runtime defines.
pub const EXPORTED: [&str; 5] = [LOOKUP, TABLE, TABLE_SIZE, INDEX, HEAD];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_names_are_the_names() {
        for (name, c_name) in [
            (LOOKUP, LOOKUP_C),
            (TABLE, TABLE_C),
            (TABLE_SIZE, TABLE_SIZE_C),
            (INDEX, INDEX_C),
            (HEAD, HEAD_C),
        ] {
            assert_eq!(c_name.to_str(), Ok(name));
        }
    }
}
