//! Modules in the driver state: cuModuleLoadData, cuModuleUnload, cuModuleGetGlobal,
//! cuModuleGetFunction. A loaded module's data sections join the memory registry (its
//! globals are device memory copies may touch) and leave it when it unloads.

use crate::errors::{Failure, Outcome, CUDA_ERROR_NOT_FOUND};
use crate::image::{cubin_for, cubin_sm_of, Image};
use crate::memory::RegionKind;
use crate::module::Module;
use crate::state::{Kernel, LoadedModule, State};
use serde_json::json;

impl State {
    /// Load `image` into the current context; returns the module's handle.
    pub fn load_module(&mut self, image: &Image) -> Outcome<u64> {
        let context = self.current()?.handle;
        let cubin = cubin_for(image, self.config.sm)?;
        let sm = cubin_sm_of(cubin)?;
        let module = Module::load(cubin)?;
        let id = self.new_module_id();
        for (addr, len, section) in module.data_ranges() {
            let kind = RegionKind::ModuleData {
                module: id,
                section: section.to_owned(),
            };
            self.memory.record(addr, len, kind);
        }
        crate::log::event(
            "module_load",
            json!({
                "module": id,
                "context": context,
                "sm": sm,
                "bytes": module.bytes,
                "from": match image { Image::Fatbin(_) => "fatbinary", _ => "cubin" },
                "symbols": module.symbols().len(),
                "kernels": module.symbols().iter().filter(|s| s.entry).count(),
            }),
        );
        self.modules.insert(
            id,
            LoadedModule {
                context,
                sm,
                module,
                kernels: Default::default(),
            },
        );
        Ok(id)
    }

    /// A loaded module whose context is still live.
    pub fn module(&self, id: u64) -> Outcome<&LoadedModule> {
        let module = self
            .modules
            .get(&id)
            .ok_or_else(|| Failure::invalid_handle(format!("{id:#x} is not a loaded module")))?;
        self.context(module.context)?;
        Ok(module)
    }

    /// cuModuleUnload.
    pub fn unload_module(&mut self, id: u64) -> Outcome {
        self.module(id)?;
        self.unload_module_now(id, "cuModuleUnload");
        Ok(())
    }

    /// Drop a module: its kernels' handles, its ranges, its memory.
    pub fn unload_module_now(&mut self, id: u64, why: &str) {
        let Some(loaded) = self.modules.remove(&id) else {
            return;
        };
        self.functions.retain(|_, (module, _)| *module != id);
        for (addr, _, _) in loaded.module.data_ranges() {
            self.memory.forget(addr);
        }
        crate::log::event("module_unload", json!({"module": id, "why": why}));
    }

    /// cuModuleGetGlobal: a data symbol's (address, size).
    pub fn module_global(&self, id: u64, name: &str) -> Outcome<(u64, u64)> {
        let loaded = self.module(id)?;
        let (addr, size) = loaded.module.global(name).ok_or_else(|| {
            Failure::new(
                CUDA_ERROR_NOT_FOUND,
                format!("name {name}: module {id:#x} has no such global"),
            )
        })?;
        crate::log::event(
            "global",
            json!({"module": id, "name": name, "address": addr, "size": size}),
        );
        Ok((addr, size))
    }

    /// cuModuleGetFunction: the handle of a function symbol (the same for every call).
    pub fn module_function(&mut self, id: u64, name: &str) -> Outcome<u64> {
        let loaded = self.module(id)?;
        let symbol = loaded.module.function(name).ok_or_else(|| {
            Failure::new(
                CUDA_ERROR_NOT_FOUND,
                format!("name {name}: module {id:#x} has no such function"),
            )
        })?;
        let kernel = Kernel {
            module: id,
            name: name.to_owned(),
            entry: symbol.entry,
            static_shared: loaded.module.static_shared(name),
            max_dynamic_shared: crate::device::SHARED_PER_BLOCK
                - loaded.module.static_shared(name) as i32,
        };
        let loaded = self.modules.get_mut(&id).expect("checked above");
        let record = loaded
            .kernels
            .entry(name.to_owned())
            .or_insert_with(|| Box::new(kernel));
        let handle = &**record as *const Kernel as u64;
        self.functions.insert(handle, (id, name.to_owned()));
        Ok(handle)
    }

    /// The kernel behind a handle cuModuleGetFunction returned, and its module.
    pub fn kernel(&self, handle: u64) -> Outcome<(&LoadedModule, &Kernel)> {
        let (id, name) = self
            .functions
            .get(&handle)
            .ok_or_else(|| Failure::invalid_handle(format!("{handle:#x} is not a function")))?;
        let loaded = self.module(*id)?;
        Ok((loaded, &loaded.kernels[name]))
    }

    pub fn kernel_mut(&mut self, handle: u64) -> Outcome<&mut Kernel> {
        self.kernel(handle)?;
        let (id, name) = &self.functions[&handle];
        let loaded = self.modules.get_mut(id).expect("checked above");
        Ok(loaded.kernels.get_mut(name).expect("checked above"))
    }
}
