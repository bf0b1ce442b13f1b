//! The symbol hash tables (DT_GNU_HASH, DT_HASH): every bucket and chain inside the
//! dynamic symbol table, every chain ending.

use super::segments::Segments;

/// `n` little-endian 32-bit words of the image at `addr`, read in place (a hash
/// table's chains are a word per symbol: no copy of them per load).
fn words<'a>(segs: &Segments<'a>, addr: u64, n: u64) -> Option<Words<'a>> {
    Some(Words(segs.file_bytes(addr, n.checked_mul(4)?)?))
}

struct Words<'a>(&'a [u8]);

impl Words<'_> {
    fn get(&self, i: usize) -> Option<u32> {
        let w = self.0.get(i.checked_mul(4)?..)?.get(..4)?;
        Some(u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
    }

    fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
    }
}

/// DT_GNU_HASH: `{nbuckets, symoffset, bloom_size, bloom_shift}`, the bloom words,
/// the buckets, then one chain word per hashed symbol (the last of a chain has bit 0
/// set). Every bucket and chain must stay inside the symbol table.
pub(super) fn gnu_hash(segs: &Segments<'_>, at: u64, nsyms: u64) -> Result<(), String> {
    let bad = |what: &str| format!("malformed DT_GNU_HASH ({what})");
    let h = words(segs, at, 4).ok_or_else(|| bad("header"))?;
    let field = |i| h.get(i).map(u64::from).ok_or_else(|| bad("header"));
    let (nbuckets, symoffset, bloom, shift) = (field(0)?, field(1)?, field(2)?, field(3)?);
    if nbuckets == 0 || symoffset > nsyms || !bloom.is_power_of_two() || shift >= 64 {
        return Err(bad("header"));
    }
    let buckets_at = at + 16 + bloom * 8;
    segs.file_bytes(at + 16, bloom * 8)
        .ok_or_else(|| bad("bloom filter"))?;
    let buckets = words(segs, buckets_at, nbuckets).ok_or_else(|| bad("buckets"))?;
    let chains_at = buckets_at + nbuckets * 4;
    let chains = words(segs, chains_at, nsyms - symoffset).ok_or_else(|| bad("chains"))?;
    for b in buckets.iter() {
        let b = u64::from(b);
        if b == 0 {
            continue;
        }
        if b < symoffset || b >= nsyms {
            return Err(bad("bucket"));
        }
        // Walk the chain: it must end (bit 0) before the symbol table does.
        let mut i = b - symoffset;
        loop {
            let Some(c) = chains.get(i as usize) else {
                return Err(bad("unterminated chain"));
            };
            if c & 1 != 0 {
                break;
            }
            i += 1;
        }
    }
    Ok(())
}

/// DT_HASH: `{nbucket, nchain}`, buckets, chains; every index below nchain == nsyms.
pub(super) fn sysv_hash(segs: &Segments<'_>, at: u64, nsyms: u64) -> Result<(), String> {
    let bad = || "malformed DT_HASH".to_string();
    let h = words(segs, at, 2).ok_or_else(bad)?;
    let (nbucket, nchain) = (
        u64::from(h.get(0).ok_or_else(bad)?),
        u64::from(h.get(1).ok_or_else(bad)?),
    );
    if nbucket == 0 || nchain != nsyms {
        return Err(bad());
    }
    let all = words(segs, at + 8, nbucket + nchain).ok_or_else(bad)?;
    if all.iter().any(|i| u64::from(i) >= nchain) {
        return Err(bad());
    }
    Ok(())
}
