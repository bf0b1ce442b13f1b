//! Kernels: cuFuncGetAttribute, cuFuncSetAttribute and cuLaunchKernel. The stand-in
//! cannot run a kernel. A launch is checked as the driver checks it (the handle, the
//! stream, the block and grid shape, dynamic shared memory against the function's
//! limit), then reported with what the kernel would find on the device: the context's
//! stack and heap limits, the module's device environment, and the indirect-function
//! table as the device runtime reads it (the `__omp_offloading_fptr_map_p` and `_size`
//! globals, then each `{host_ptr, tgt_ptr}` row, every tgt_ptr named `symbol+offset`).
//! By default the launch then fails with CUDA_ERROR_NOT_SUPPORTED (libomptarget stops
//! at its first target region, after the load); `OMPTARGET_RS_CUDA_STANDIN_LAUNCH=skip`
//! makes it succeed without running anything.

use crate::device::{MAX_BLOCK_DIM, MAX_GRID_DIM, MAX_THREADS_PER_BLOCK, SHARED_PER_BLOCK_OPTIN};
use crate::errors::{Failure, Outcome, CUDA_ERROR_NOT_SUPPORTED};
use crate::log::hex;
use crate::memory::read;
use crate::state::{LoadedModule, State, LIMIT_MALLOC_HEAP_SIZE, LIMIT_STACK_SIZE};
use serde_json::{json, Value};

pub const LAUNCH_ENV: &str = "OMPTARGET_RS_CUDA_STANDIN_LAUNCH";
/// The most table rows one launch event lists (`OMPTARGET_RS_CUDA_STANDIN_MAX_ROWS`).
pub const MAX_ROWS_ENV: &str = "OMPTARGET_RS_CUDA_STANDIN_MAX_ROWS";
const DEFAULT_MAX_ROWS: u64 = 4096;

/// The device environment's names, newest first (LLVM 16+, then older).
const DEVICE_ENVIRONMENTS: [&str; 2] = [
    "__omp_rtl_device_environment",
    "omptarget_device_environment",
];
const TABLE_POINTER: &str = "__omp_offloading_fptr_map_p";
const TABLE_SIZE: &str = "__omp_offloading_fptr_map_size";

/// CU_FUNC_ATTRIBUTE_* values (the driver API's numbers, checked against cudarc).
pub mod attribute {
    pub const MAX_THREADS_PER_BLOCK: u32 = 0;
    pub const SHARED_SIZE_BYTES: u32 = 1;
    pub const NUM_REGS: u32 = 4;
    pub const PTX_VERSION: u32 = 5;
    pub const BINARY_VERSION: u32 = 6;
    pub const MAX_DYNAMIC_SHARED_SIZE_BYTES: u32 = 8;
    pub const PREFERRED_SHARED_MEMORY_CARVEOUT: u32 = 9;
    /// The cluster attributes (10..=15) may be set; none above.
    pub const LAST_SETTABLE: u32 = 15;
    /// The highest attribute number accepted at all.
    pub const LAST: u32 = 63;
}

/// What cuLaunchKernel was asked.
pub struct Launch {
    pub kernel: u64,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared: u32,
    pub stream: u64,
}

impl State {
    /// cuFuncGetAttribute.
    pub fn function_attribute(&self, handle: u64, attr: u32) -> Outcome<i32> {
        let (loaded, kernel) = self.kernel(handle)?;
        use attribute::*;
        if attr > LAST {
            return Err(Failure::invalid_value(format!("function attribute {attr}")));
        }
        Ok(match attr {
            MAX_THREADS_PER_BLOCK => crate::device::MAX_THREADS_PER_BLOCK,
            SHARED_SIZE_BYTES => kernel.static_shared as i32,
            NUM_REGS => 32,
            PTX_VERSION | BINARY_VERSION => loaded.sm as i32,
            MAX_DYNAMIC_SHARED_SIZE_BYTES => kernel.max_dynamic_shared,
            PREFERRED_SHARED_MEMORY_CARVEOUT => -1,
            _ => 0,
        })
    }

    /// cuFuncSetAttribute: the dynamic shared memory limit (up to the opt-in maximum
    /// less the static shared memory), the carveout and the cluster attributes.
    pub fn set_function_attribute(&mut self, handle: u64, attr: u32, value: i32) -> Outcome {
        let kernel = self.kernel_mut(handle)?;
        use attribute::*;
        match attr {
            MAX_DYNAMIC_SHARED_SIZE_BYTES => {
                let most = SHARED_PER_BLOCK_OPTIN - kernel.static_shared as i32;
                if !(0..=most).contains(&value) {
                    return Err(Failure::invalid_value(format!(
                        "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES {value} for {}: at \
                         most {most} (the opt-in maximum {SHARED_PER_BLOCK_OPTIN} less {} \
                         static)",
                        kernel.name, kernel.static_shared
                    )));
                }
                kernel.max_dynamic_shared = value;
            }
            PREFERRED_SHARED_MEMORY_CARVEOUT..=LAST_SETTABLE => {}
            _ => {
                return Err(Failure::invalid_value(format!(
                    "function attribute {attr} cannot be set"
                )))
            }
        }
        crate::log::event(
            "set_attribute",
            json!({"function": kernel.name, "module": kernel.module, "attribute": attr, "value": value}),
        );
        Ok(())
    }

    /// cuLaunchKernel: check, report, then refuse (or, with
    /// `OMPTARGET_RS_CUDA_STANDIN_LAUNCH=skip`, succeed).
    pub fn launch(&self, launch: &Launch) -> Outcome {
        self.check_stream(launch.stream)?;
        let (loaded, kernel) = self.kernel(launch.kernel)?;
        check_shape(launch)?;
        if launch.shared as i64 > kernel.max_dynamic_shared as i64 {
            return Err(Failure::invalid_value(format!(
                "{}: {} bytes of dynamic shared memory, over the function's limit of {} \
                 (48 KiB less its {} static unless raised with \
                 CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)",
                kernel.name, launch.shared, kernel.max_dynamic_shared, kernel.static_shared
            )));
        }
        let context = self.context(loaded.context)?;
        let (table, table_error) = self.table(loaded);
        crate::log::event(
            "launch",
            json!({
                "kernel": kernel.name,
                "module": kernel.module,
                "entry": kernel.entry,
                "grid": launch.grid,
                "block": launch.block,
                "shared_bytes": launch.shared,
                "stream": launch.stream,
                "context": context.handle,
                "stack_size": context.limit(LIMIT_STACK_SIZE),
                "heap_size": context.limit(LIMIT_MALLOC_HEAP_SIZE),
                "device_environment": self.device_environment(loaded),
                "table": table,
            }),
        );
        if let Some(why) = table_error {
            return Err(Failure::invalid_value(format!(
                "{}: the device would read the indirect-function table: {why}",
                kernel.name
            )));
        }
        if std::env::var(LAUNCH_ENV).is_ok_and(|v| v == "skip") {
            return Ok(());
        }
        Err(Failure::new(
            CUDA_ERROR_NOT_SUPPORTED,
            format!(
                "{}: the stand-in cannot run kernels ({LAUNCH_ENV}=skip makes launches \
                 succeed without running)",
                kernel.name
            ),
        ))
    }

    /// The module's device environment: its name and bytes, or null.
    fn device_environment(&self, loaded: &LoadedModule) -> Value {
        for name in DEVICE_ENVIRONMENTS {
            if let Some((addr, size)) = loaded.module.global(name) {
                let bytes = read(&self.memory, addr, size as usize, name);
                return json!({
                    "name": name,
                    "address": addr,
                    "bytes": bytes.map(|b| hex(&b)).unwrap_or_else(|e| e.detail),
                });
            }
        }
        Value::Null
    }

    /// The table as the device runtime reads it (null without its globals), and why the
    /// device could not read it, if it could not.
    fn table(&self, loaded: &LoadedModule) -> (Value, Option<String>) {
        let module = &loaded.module;
        let (Some((p_addr, _)), Some((n_addr, _))) =
            (module.global(TABLE_POINTER), module.global(TABLE_SIZE))
        else {
            return (Value::Null, None);
        };
        let word = |addr: u64, name: &str| -> Outcome<u64> {
            let b = read(&self.memory, addr, 8, name)?;
            Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
        };
        let (map_p, map_size) = match (word(p_addr, TABLE_POINTER), word(n_addr, TABLE_SIZE)) {
            (Ok(p), Ok(n)) => (p, n),
            (Err(e), _) | (_, Err(e)) => return (json!({"error": e.detail}), Some(e.detail)),
        };
        let max_rows = std::env::var(MAX_ROWS_ENV)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(DEFAULT_MAX_ROWS);
        let listed = map_size.min(max_rows);
        let mut table = json!({
            "map_p": map_p,
            "map_size": map_size,
            "truncated": listed < map_size,
        });
        if map_size == 0 {
            table["rows"] = json!([]);
            return (table, None);
        }
        let whole = map_size
            .checked_mul(16)
            .and_then(|b| usize::try_from(b).ok());
        let check = match whole {
            Some(len) => self.memory.check(map_p, len, "the table"),
            None => Err(Failure::invalid_value(format!("{map_size} rows"))),
        };
        if let Err(e) = check {
            table["error"] = json!(e.detail);
            return (table, Some(e.detail));
        }
        let bytes =
            read(&self.memory, map_p, listed as usize * 16, "the table").expect("checked above");
        let rows: Vec<Value> = bytes
            .chunks_exact(16)
            .map(|row| {
                let host = u64::from_le_bytes(row[..8].try_into().expect("8 bytes"));
                let tgt = u64::from_le_bytes(row[8..].try_into().expect("8 bytes"));
                let name = module.name_of(tgt).unwrap_or_else(|| "unknown".into());
                json!({"host": host, "tgt": tgt, "tgt_name": name})
            })
            .collect();
        table["rows"] = json!(rows);
        (table, None)
    }
}

fn check_shape(launch: &Launch) -> Outcome {
    let within =
        |dims: [u32; 3], most: [u32; 3]| dims.iter().zip(most).all(|(&d, m)| (1..=m).contains(&d));
    let threads: u64 = launch.block.iter().map(|&b| b as u64).product();
    if !within(launch.grid, MAX_GRID_DIM) {
        return Err(Failure::invalid_value(format!(
            "grid {:?}: each dimension from 1 to {MAX_GRID_DIM:?}",
            launch.grid
        )));
    }
    if !within(launch.block, MAX_BLOCK_DIM) || threads > MAX_THREADS_PER_BLOCK as u64 {
        return Err(Failure::invalid_value(format!(
            "block {:?}: each dimension from 1 to {MAX_BLOCK_DIM:?}, at most \
             {MAX_THREADS_PER_BLOCK} threads",
            launch.block
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cudarc::driver::sys::CUfunction_attribute as A;

    #[test]
    fn attribute_numbers_are_the_driver_apis() {
        use attribute::*;
        let pairs = [
            (
                MAX_THREADS_PER_BLOCK,
                A::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
            ),
            (SHARED_SIZE_BYTES, A::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES),
            (NUM_REGS, A::CU_FUNC_ATTRIBUTE_NUM_REGS),
            (PTX_VERSION, A::CU_FUNC_ATTRIBUTE_PTX_VERSION),
            (BINARY_VERSION, A::CU_FUNC_ATTRIBUTE_BINARY_VERSION),
            (
                MAX_DYNAMIC_SHARED_SIZE_BYTES,
                A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            ),
            (
                PREFERRED_SHARED_MEMORY_CARVEOUT,
                A::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
            ),
            (
                LAST_SETTABLE,
                A::CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
            ),
        ];
        for (ours, theirs) in pairs {
            assert_eq!(ours, theirs as u32, "{theirs:?}");
        }
    }

    #[test]
    fn shapes_are_checked_as_the_driver_does() {
        let launch = |grid, block| Launch {
            kernel: 0,
            grid,
            block,
            shared: 0,
            stream: 0,
        };
        assert!(check_shape(&launch([3200, 1, 1], [128, 1, 1])).is_ok());
        assert!(check_shape(&launch([1, 1, 1], [1024, 1, 1])).is_ok());
        assert!(check_shape(&launch([1, 1, 1], [1025, 1, 1])).is_err());
        assert!(check_shape(&launch([1, 1, 1], [64, 32, 1])).is_err());
        assert!(check_shape(&launch([0, 1, 1], [1, 1, 1])).is_err());
        assert!(check_shape(&launch([1, 65536, 1], [1, 1, 1])).is_err());
    }
}
