//! The iteration order of LLVM's `StringMap`, which is the order in which
//! `clang-offload-bundler -list` prints bundle IDs (it stores them in a `StringMap`).
//!
//! `StringMap` is an open-addressing table: 16 buckets to start, the bucket index is
//! the low bits of `xxh3_64(key)` truncated to 32 bits, collisions probe quadratically
//! (`+1, +2, +3, ...`), and the table doubles when more than 3/4 full, re-inserting the
//! old buckets in order. Iteration walks the buckets from 0.

use xxhash_rust::xxh3::xxh3_64;

/// Indices of `keys` in the order a `StringMap` filled with them (in this order) iterates.
/// Repeated keys keep their first position, as an insert of an existing key does.
pub fn string_map_order(keys: &[&str]) -> Vec<usize> {
    // Each bucket: (full 32-bit hash, key index).
    let mut buckets: Vec<Option<(u32, usize)>> = vec![None; 16];
    let mut items = 0usize;
    for (index, key) in keys.iter().enumerate() {
        let hash = xxh3_64(key.as_bytes()) as u32;
        let mask = buckets.len() - 1;
        let mut slot = hash as usize & mask;
        let mut probe = 1;
        let mut duplicate = false;
        while let Some((h, k)) = buckets[slot] {
            if h == hash && keys[k] == *key {
                duplicate = true;
                break;
            }
            slot = (slot + probe) & mask;
            probe += 1;
        }
        if duplicate {
            continue;
        }
        buckets[slot] = Some((hash, index));
        items += 1;
        if items * 4 > buckets.len() * 3 {
            buckets = rehash(&buckets, buckets.len() * 2);
        }
    }
    buckets.into_iter().flatten().map(|(_, k)| k).collect()
}

fn rehash(old: &[Option<(u32, usize)>], size: usize) -> Vec<Option<(u32, usize)>> {
    let mut new = vec![None; size];
    let mask = size - 1;
    for (hash, key) in old.iter().flatten().copied() {
        let mut slot = hash as usize & mask;
        let mut probe = 1;
        while new[slot].is_some() {
            slot = (slot + probe) & mask;
            probe += 1;
        }
        new[slot] = Some((hash, key));
    }
    new
}

/// Indices of `keys` in the iteration order of an LLVM `DenseMap<StringRef, _>` filled
/// with them, which is how llvm-offload-binary orders an image's strings (it keeps its
/// `--image` keys in one). A DenseMap starts with 64 buckets, takes the bucket from
/// the low bits of `hash_value(StringRef)` truncated to 32 bits, and probes
/// quadratically. `None` when a key is longer than 32 bytes, a length whose hash we do
/// not reproduce.
pub fn dense_map_order(keys: &[&str]) -> Option<Vec<usize>> {
    let mut size = 64usize;
    while keys.len() * 4 >= size * 3 {
        size *= 2;
    }
    let mask = size - 1;
    let mut buckets: Vec<Option<usize>> = vec![None; size];
    for (index, key) in keys.iter().enumerate() {
        let mut slot = llvm_hash_value(key.as_bytes())? as u32 as usize & mask;
        let mut probe = 1;
        let mut duplicate = false;
        while let Some(k) = buckets[slot] {
            if keys[k] == *key {
                duplicate = true;
                break;
            }
            slot = (slot + probe) & mask;
            probe += 1;
        }
        if !duplicate {
            buckets[slot] = Some(index);
        }
    }
    Some(buckets.into_iter().flatten().collect())
}

/// LLVM's `hash_value(StringRef)` (`hash_combine_range`, a CityHash variant with
/// LLVM's fixed execution seed) for inputs of at most 32 bytes.
fn llvm_hash_value(s: &[u8]) -> Option<u64> {
    const K0: u64 = 0xc3a5_c85c_97cb_3127;
    const K1: u64 = 0xb492_b66f_be98_f273;
    const K2: u64 = 0x9ae1_6a3b_2f90_404f;
    const K3: u64 = 0xc949_d7c7_509e_6557;
    const SEED: u64 = 0xff51_afd7_ed55_8ccd;
    let fetch32 =
        |at: usize| u64::from(u32::from_le_bytes([s[at], s[at + 1], s[at + 2], s[at + 3]]));
    let fetch64 = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&s[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let shift_mix = |v: u64| v ^ (v >> 47);
    let hash_16 = |low: u64, high: u64| {
        const MUL: u64 = 0x9ddf_ea08_eb38_2d69;
        let a = shift_mix((low ^ high).wrapping_mul(MUL));
        shift_mix((high ^ a).wrapping_mul(MUL)).wrapping_mul(MUL)
    };
    let len = s.len();
    let n = len as u64;
    Some(match len {
        0 => K2 ^ SEED,
        1..=3 => {
            let y = u64::from(s[0]) + (u64::from(s[len >> 1]) << 8);
            let z = n + (u64::from(s[len - 1]) << 2);
            shift_mix(y.wrapping_mul(K2) ^ z.wrapping_mul(K3) ^ SEED).wrapping_mul(K2)
        }
        4..=8 => hash_16(n.wrapping_add(fetch32(0) << 3), SEED ^ fetch32(len - 4)),
        9..=16 => {
            let (a, b) = (fetch64(0), fetch64(len - 8));
            hash_16(SEED ^ a, b.wrapping_add(n).rotate_right(len as u32)) ^ b
        }
        17..=32 => {
            let a = fetch64(0).wrapping_mul(K1);
            let b = fetch64(8);
            let c = fetch64(len - 8).wrapping_mul(K2);
            let d = fetch64(len - 16).wrapping_mul(K0);
            hash_16(
                a.wrapping_sub(b)
                    .rotate_right(43)
                    .wrapping_add((c ^ SEED).rotate_right(30))
                    .wrapping_add(d),
                a.wrapping_add((b ^ K3).rotate_right(20))
                    .wrapping_sub(c)
                    .wrapping_add(n)
                    .wrapping_add(SEED),
            )
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_distinct_key_once() {
        let keys: Vec<String> = (0..100).map(|i| format!("key{i}")).collect();
        let mut refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        refs.push("key7"); // a repeat keeps its first position only
        for order in [string_map_order(&refs), dense_map_order(&refs).unwrap()] {
            let mut sorted = order.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..100).collect::<Vec<_>>());
        }
    }

    #[test]
    fn long_keys_have_no_dense_map_order() {
        assert!(dense_map_order(&["a-key-that-is-longer-than-thirty-two-bytes"]).is_none());
    }
}
