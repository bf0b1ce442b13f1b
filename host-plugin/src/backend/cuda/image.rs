//! CUDA image kinds and the SM rule are offload-formats' ([`offload_formats::cuda`]);
//! re-exported here where the CUDA backend and its tests name them.

pub use offload_formats::cuda::{classify, cubin_runs_on, CudaImage};
