//! Reading ELF device images, a leaf any layer may import: the generic image checks
//! ([`image`]) and the image's symbol tables ([`symbols`]). A folder of its own beside
//! [`crate::support`] because these two are one subject (an image's ELF contents) and
//! import only each other and `support`; they name no vendor and no core type.

pub mod image;
pub mod symbols;
