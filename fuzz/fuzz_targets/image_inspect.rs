//! The plugin's validation of a device image before the host backend dlopens it, on
//! mutated ELF shared objects (seeded with real clang-16 and clang-22 outputs).
#![no_main]
use host_plugin::backend::host::inspect_loadable;
use host_plugin::elf::image::{elf_machine, ImageError};
use host_plugin::elf::symbols::Wanted;
use host_plugin::{Plugin, PluginKind};
use libfuzzer_sys::fuzz_target;
/// `EM_X86_64`, the host backend's machine.
const EM_X86_64: u16 = 62;
use std::sync::OnceLock;

/// The symbols a clang-16 device image exports (plus names no image has).
const NAMES: &[&[u8]] = &[
    b"__omp_offloading_fptr_map_p",
    b"__omp_offloading_fptr_map_size",
    b"__kmpc_target_translate_fptr",
    b"kernel_call",
    b"add_one",
    b"vtable_ptr",
    b"",
    b"no_such_symbol",
];

fn plugin() -> &'static Plugin {
    static PLUGIN: OnceLock<Plugin> = OnceLock::new();
    PLUGIN.get_or_init(|| Plugin::new(PluginKind::X86_64))
}

fuzz_target!(|data: &[u8]| {
    let machine = elf_machine(data);
    // libomptarget's first question: cheap, and must agree with the header check.
    let valid = plugin().is_valid_binary(data);
    assert_eq!(valid, machine == Some(EM_X86_64));
    match inspect_loadable(data) {
        Ok(symbols) => {
            // Accepted: an x86-64 ELF64 (so the cheap check said yes too).
            assert!(valid);
            // Batched lookups give the one-by-one answers.
            let mut batched = Vec::new();
            symbols.dynamic_batch(NAMES, &mut batched);
            for (name, found) in NAMES.iter().zip(&batched) {
                assert_eq!(*found, symbols.dynamic(name));
            }
            for name in NAMES {
                let _ = symbols.size_of(name);
                // The seed convention's rule: the GNU hash table, then the static
                // symbol table's index, on whatever the mutation left of them.
                for wanted in [Wanted::Function, Wanted::Data] {
                    if let Ok(sym) = symbols.indirect_target(name, wanted) {
                        let _ = symbols.within_one_symbol(sym.value, sym.size);
                    }
                }
            }
        }
        Err(ImageError::WrongMachine { found, expected }) => {
            assert_eq!(Some(found), machine);
            assert_eq!(expected, EM_X86_64);
        }
        Err(ImageError::NotElf(_)) => assert_eq!(machine, None),
        Err(_) => assert_eq!(machine, Some(EM_X86_64)),
    }
});
