//! The flag bits of an OpenMP offload entry.

pub const LINK: u32 = 0x1;
pub const CTOR: u32 = 0x2;
pub const DTOR: u32 = 0x4;
pub const INDIRECT: u32 = 0x8;
pub const REQUIRES: u32 = 0x10;
/// An indirect vtable. LLVM's loader (`setupIndirectCallTable`) treats an entry as one
/// whenever this bit is set, with or without [`INDIRECT`]; so do we.
pub const INDIRECT_VTABLE: u32 = 0x20;

/// The entry goes into the indirect function table (a function or a vtable).
pub const fn is_indirect(flags: u32) -> bool {
    flags & (INDIRECT | INDIRECT_VTABLE) != 0
}

/// Names of the set bits, plus `0x..` for bits we do not know.
pub fn names(flags: u32) -> Vec<String> {
    let known = [
        (LINK, "link"),
        (CTOR, "ctor"),
        (DTOR, "dtor"),
        (INDIRECT, "indirect"),
        (REQUIRES, "requires"),
        (INDIRECT_VTABLE, "indirect_vtable"),
    ];
    let mut out: Vec<String> = known
        .iter()
        .filter(|(bit, _)| flags & bit != 0)
        .map(|(_, n)| (*n).to_owned())
        .collect();
    let unknown = flags & !known.iter().fold(0, |a, (b, _)| a | b);
    if unknown != 0 {
        out.push(format!("{unknown:#x}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_names() {
        assert_eq!(names(0x8), ["indirect"]);
        assert_eq!(names(0x21), ["link", "indirect_vtable"]);
        assert_eq!(names(0x106), ["ctor", "dtor", "0x100"]);
    }
}
