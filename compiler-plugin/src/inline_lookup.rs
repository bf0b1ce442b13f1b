//! Device code for the host device (x86_64): the lookup written out at each call, its
//! invariant part loaded once per function.
//!
//! Out of line, every `__kmpc_target_translate_fptr` call reloads the head and the index
//! header (they sit behind the GOT, and a call in between may write memory, as far as the
//! compiler knows) before the key even reaches a compare, and the call that follows waits
//! for all of it. Here, after the rewrites (translate.rs, vptr.rs) and the optimizer are
//! done, each call of the lookup in a function becomes the device RTL's own fast paths in
//! place, over values loaded once at the function's entry:
//! - the head (`__omptarget_rs_fptr_head`, [`device_rtl::head`]): a key outside the
//!   table's range comes back unchanged; a table of at most four rows answers from them;
//! - the index (`__omptarget_rs_fptr_index`, [`device_rtl::index`]): two buckets read at
//!   the hashed positions, when its header is valid;
//! - otherwise (no index: a table the plugin handed over without one, or a plugin that
//!   writes none) the device RTL's search, called as before.
//!
//! Before all of that, each call site asks its memo: the last two keys it translated and
//! their answers ([`MEMO_WORDS`]), on the stack and in registers once SROA has run. A
//! loop of virtual calls on objects of one or two classes answers from it, so the
//! call's target no longer waits for the lookup's loads and hashes.
//!
//! The entry loads are marked `!invariant.load`: the plugin writes both globals before any
//! kernel of the image runs and never while one runs, as the device RTL's own contract
//! says (the same contract makes a memo's answers stay true). The rules are the device
//! RTL's (its layouts and constants come from that crate); tests/tests/compiler_plugin.rs
//! checks every answer against the out-of-line lookup's, at every table shape, with and
//! without the index, memo hits and misses included.
//!
//! GPU targets keep the call: there the device RTL's bitcode (clang 22) already inlines
//! and hoists the lookup, and the clang-16 path (the devicertl archive's cubin) gets this
//! once a GPU run has measured it.
use crate::ir::{Ir, Value};
use crate::translate::LOOKUP;
use device_rtl::head::{FptrHead, HEAD_ROWS};
use device_rtl::index::{FptrIndex, BUCKET_BYTES, SLOTS};
use device_rtl::table::FptrMapEntry;
use llvm_plugin::inkwell::builder::{Builder, BuilderError};
use llvm_plugin::inkwell::module::Linkage;
use llvm_plugin::inkwell::types::BasicMetadataTypeEnum;
use llvm_plugin::inkwell::values::{
    BasicMetadataValueEnum, FunctionValue, GlobalValue, InstructionValue, IntValue, PointerValue,
};
use llvm_plugin::inkwell::IntPredicate;
use std::mem::{offset_of, size_of};

/// The internal function each call becomes before LLVM's always-inliner writes it out.
pub const INLINE_LOOKUP: &str = "__omptarget_rs_translate_inline";

/// `OMPTARGET_INDIRECT_INLINE_LOOKUP=0` at compile time keeps every lookup out of line
/// (to compare the two, or to read the rewrites alone).
pub const DISABLE_ENV: &str = "OMPTARGET_INDIRECT_INLINE_LOOKUP";

/// `OMPTARGET_INDIRECT_INLINE_MUTANT=<name>` at compile time writes a deliberately wrong
/// inline lookup ([`Mutant`]), for the mutation checks of tests/tests/compiler_plugin.rs:
/// the differential test must fail on each. Every module it touches says so on stderr.
pub const MUTANT_ENV: &str = "OMPTARGET_INDIRECT_INLINE_MUTANT";

/// A wrong inline lookup on purpose ([`MUTANT_ENV`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mutant {
    /// A hit on the memo's second key answers with the first key's answer.
    MemoSecondAnswer,
    /// The index probe reads the first seed's bucket only.
    FirstBucketOnly,
}

impl Mutant {
    /// Each mutant by the name [`MUTANT_ENV`] takes.
    pub const NAMES: [(&'static str, Mutant); 2] = [
        ("memo-second-answer", Mutant::MemoSecondAnswer),
        ("first-bucket-only", Mutant::FirstBucketOnly),
    ];

    /// The mutant [`MUTANT_ENV`] asks for; an unknown name is said and ignored.
    fn from_env() -> Option<Mutant> {
        let name = std::env::var(MUTANT_ENV).ok()?;
        let found = Self::NAMES
            .iter()
            .find(|(n, _)| *n == name.trim())
            .map(|&(_, m)| m);
        if found.is_none() {
            eprintln!(
                "omptarget-indirect: {MUTANT_ENV}={name:?} names no mutant ({}): the lookup is written as it should be",
                Self::NAMES.map(|(n, _)| n).join(", ")
            );
        }
        found
    }
}

/// Only the host device's code (see the module documentation), unless disabled.
pub fn wanted(ir: &Ir) -> bool {
    ir.triple().starts_with("x86_64")
        && std::env::var(DISABLE_ENV).map_or(true, |v| v.trim() != "0")
}

/// Each call site's memo: its last two keys and answers, 8-byte words in this order, zero
/// at the function's entry. Zero is a true answer for key zero: the plugin keeps no row
/// of the null host address (host-plugin/src/generic/table/fptr.rs), so the lookup maps null to null.
/// A loop of virtual calls on objects of one or two classes then answers from the memo,
/// and the call's target no longer waits for the lookup.
#[derive(Clone, Copy)]
enum MemoWord {
    Key0,
    Answer0,
    Key1,
    Answer1,
}

const MEMO_WORDS: u32 = 4;

impl MemoWord {
    fn offset(self) -> u64 {
        8 * self as u64
    }
}

/// What one function loads at its entry: the head's range and rows, the index header and
/// whether it is valid. [`INLINE_LOOKUP`] takes it after the pointer and the memo, in the
/// order of [`State::values`].
struct State<'ctx> {
    first_key: IntValue<'ctx>,
    span_complement: IntValue<'ctx>,
    rows_here: IntValue<'ctx>,
    /// (key, target) of each head row.
    rows: [(IntValue<'ctx>, IntValue<'ctx>); HEAD_ROWS],
    buckets: IntValue<'ctx>,
    bucket_count: IntValue<'ctx>,
    seeds: [IntValue<'ctx>; 2],
    /// An `i1`, the last: `IndexView::from_header`'s checks passed.
    index_valid: IntValue<'ctx>,
}

impl<'ctx> State<'ctx> {
    /// The 8-byte words before `index_valid`.
    const WORDS: usize = 3 + 2 * HEAD_ROWS + 4;

    /// The values in parameter order.
    fn values(&self) -> Vec<IntValue<'ctx>> {
        let mut v = vec![self.first_key, self.span_complement, self.rows_here];
        v.extend(self.rows.iter().flat_map(|&(key, target)| [key, target]));
        v.extend([self.buckets, self.bucket_count]);
        v.extend(self.seeds);
        v.push(self.index_valid);
        v
    }

    /// The inverse of [`State::values`].
    fn from_values(mut v: impl Iterator<Item = IntValue<'ctx>>) -> Self {
        let mut next = || v.next().expect("a value per parameter");
        State {
            first_key: next(),
            span_complement: next(),
            rows_here: next(),
            rows: std::array::from_fn(|_| (next(), next())),
            buckets: next(),
            bucket_count: next(),
            seeds: [next(), next()],
            index_valid: next(),
        }
    }

    /// The parameter types of [`State::values`].
    fn types(ir: &Ir<'_, 'ctx>) -> Vec<BasicMetadataTypeEnum<'ctx>> {
        let mut types = vec![BasicMetadataTypeEnum::from(ir.i64_type()); Self::WORDS];
        types.push(ir.bool_type().into());
        types
    }
}

/// Write out every call of the lookup in the module's functions; returns how many.
pub fn inline_lookups(ir: &Ir) -> usize {
    let Some(lookup) = ir.function(LOOKUP) else {
        return 0;
    };
    // The device RTL's own module (or a test's) defines the lookup: leave it alone.
    if !ir.is_declaration(lookup.as_global_value()) {
        return 0;
    }
    let sites: Vec<(FunctionValue, Vec<InstructionValue>)> = ir
        .functions()
        .into_iter()
        .filter(|f| !ir.is_declaration(f.as_global_value()))
        .map(|f| {
            let calls = ir
                .call_sites(f)
                .into_iter()
                .filter(|&c| ir.is_call_to(Value::of(c), lookup) && c.get_num_operands() == 2)
                .collect::<Vec<_>>();
            (f, calls)
        })
        .filter(|(_, calls)| !calls.is_empty())
        .collect();
    if sites.is_empty() {
        return 0;
    }
    let mutant = Mutant::from_env();
    if let Some(m) = mutant {
        eprintln!(
            "omptarget-indirect: {} ({}): MUTANT {m:?}: the inline lookup is wrong on purpose ({MUTANT_ENV})",
            ir.source_file_name(),
            ir.triple()
        );
    }
    let written = match write_out(ir, lookup, &sites, mutant) {
        Ok(n) => n,
        Err(e) => {
            // Calls not yet rewritten stay calls (slower, never wrong). Say so rather
            // than hide it.
            eprintln!("omptarget-indirect: the lookup stays out of line: {e}");
            return 0;
        }
    };
    if let Err(message) = ir.run_always_inliner() {
        eprintln!("omptarget-indirect: always-inline: {message}");
    }
    written
}

fn write_out<'ctx>(
    ir: &Ir<'_, 'ctx>,
    lookup: FunctionValue<'ctx>,
    sites: &[(FunctionValue<'ctx>, Vec<InstructionValue<'ctx>>)],
    mutant: Option<Mutant>,
) -> Result<usize, BuilderError> {
    let globals = Globals::declare(ir);
    let inline = define_inline_lookup(ir, lookup, mutant)?;
    // Nothing is rewritten until the helper is whole; from here on a failed rewrite
    // leaves its call as it was (slower, never wrong).
    let mut written = 0;
    for (function, calls) in sites {
        let state = load_state(ir, *function, &globals)?.values();
        for &call in calls {
            let memo = ir.zeroed_entry_words(*function, MEMO_WORDS, "lookup.memo")?;
            let mut arguments = vec![memo.into()];
            arguments.extend(state.iter().map(|&v| BasicMetadataValueEnum::from(v)));
            if ir.replace_call(call, inline, &arguments) {
                written += 1;
            }
        }
    }
    Ok(written)
}

/// The two globals, declared where the module does not already name them (the device
/// RTL, linked into the image, defines them).
struct Globals<'ctx> {
    head: GlobalValue<'ctx>,
    index: GlobalValue<'ctx>,
}

impl<'ctx> Globals<'ctx> {
    fn declare(ir: &Ir<'_, 'ctx>) -> Self {
        Globals {
            head: ir.get_or_declare_words(device_rtl::symbols::HEAD, size_of::<FptrHead>()),
            index: ir.get_or_declare_words(device_rtl::symbols::INDEX, size_of::<FptrIndex>()),
        }
    }
}

/// The head's and the index header's words at `function`'s entry, invariant loads, and
/// the index header's validity (`IndexView::from_header`'s checks).
fn load_state<'ctx>(
    ir: &Ir<'_, 'ctx>,
    function: FunctionValue<'ctx>,
    globals: &Globals<'ctx>,
) -> Result<State<'ctx>, BuilderError> {
    let b = ir.builder_at_entry(function);
    let word = |global: GlobalValue<'ctx>, offset: usize, name: &str| {
        ir.load_invariant_at(&b, global.as_pointer_value(), offset as u64, name)
    };
    let (head, index) = (globals.head, globals.index);
    let row = |r: usize| {
        let at = offset_of!(FptrHead, rows) + r * size_of::<FptrMapEntry>();
        Ok::<_, BuilderError>((
            word(head, at + offset_of!(FptrMapEntry, host_ptr), "head.key")?,
            word(head, at + offset_of!(FptrMapEntry, tgt_ptr), "head.target")?,
        ))
    };
    // In the globals' order.
    let first_key = word(head, offset_of!(FptrHead, first_key), "head.first")?;
    let span_complement = word(
        head,
        offset_of!(FptrHead, span_complement),
        "head.span_complement",
    )?;
    let rows_here = word(head, offset_of!(FptrHead, rows_here), "head.rows_here")?;
    let mut rows = Vec::with_capacity(HEAD_ROWS);
    for r in 0..HEAD_ROWS {
        rows.push(row(r)?);
    }
    let seeds = offset_of!(FptrIndex, seeds);
    let buckets = word(index, offset_of!(FptrIndex, buckets), "index.buckets")?;
    let bucket_count = word(index, offset_of!(FptrIndex, bucket_count), "index.count")?;
    let seeds = [
        word(index, seeds, "index.seed0")?,
        word(index, seeds + 8, "index.seed1")?,
    ];
    Ok(State {
        first_key,
        span_complement,
        rows_here,
        rows: rows.try_into().expect("HEAD_ROWS rows"),
        buckets,
        bucket_count,
        seeds,
        index_valid: index_valid(ir, &b, buckets, bucket_count, seeds)?,
    })
}

/// `IndexView::from_header`'s checks: buckets present and aligned, a count the address
/// space can hold, both seeds odd.
fn index_valid<'ctx>(
    ir: &Ir<'_, 'ctx>,
    b: &Builder<'ctx>,
    buckets: IntValue<'ctx>,
    count: IntValue<'ctx>,
    [seed0, seed1]: [IntValue<'ctx>; 2],
) -> Result<IntValue<'ctx>, BuilderError> {
    let i64 = ir.i64_type();
    let max_count = (isize::MAX as usize / BUCKET_BYTES) as u64;
    let align_mask = (std::mem::align_of::<FptrMapEntry>() - 1) as u64;
    let present = b.build_int_compare(IntPredicate::NE, buckets, i64.const_zero(), "")?;
    let misalignment = b.build_and(buckets, i64.const_int(align_mask, false), "")?;
    let aligned = b.build_int_compare(IntPredicate::EQ, misalignment, i64.const_zero(), "")?;
    let count_less_one = b.build_int_sub(count, i64.const_int(1, false), "")?;
    let fits = b.build_int_compare(
        IntPredicate::ULT,
        count_less_one,
        i64.const_int(max_count, false),
        "",
    )?;
    let seeds = b.build_and(seed0, seed1, "")?;
    let odd = b.build_and(seeds, i64.const_int(1, false), "")?;
    let odd = b.build_int_compare(IntPredicate::NE, odd, i64.const_zero(), "")?;
    let valid = b.build_and(present, aligned, "")?;
    let valid = b.build_and(valid, fits, "")?;
    b.build_and(valid, odd, "index.valid")
}

/// `ptr @__omptarget_rs_translate_inline(ptr %p, ptr %memo, <the state>)`: internal,
/// always inlined, the device RTL's `__kmpc_target_translate_fptr` over the state, calling
/// `lookup` (the search) only where the device RTL would search, behind the call site's
/// memo of its last two answers ([`MEMO_WORDS`]).
fn define_inline_lookup<'ctx>(
    ir: &Ir<'_, 'ctx>,
    lookup: FunctionValue<'ctx>,
    mutant: Option<Mutant>,
) -> Result<FunctionValue<'ctx>, BuilderError> {
    if let Some(existing) = ir.function(INLINE_LOOKUP) {
        return Ok(existing);
    }
    let mut parameters = vec![ir.ptr_type().into(), ir.ptr_type().into()];
    parameters.extend(State::types(ir));
    let f = ir.add_function(
        INLINE_LOOKUP,
        ir.ptr_type().fn_type(&parameters, false),
        Linkage::Internal,
    );
    ir.mark_always_inline(f);
    write_inline_lookup(ir, f, lookup, mutant).inspect_err(|_| {
        // A helper left half-built would be invalid IR: take it out again.
        ir.delete_function(f);
    })?;
    Ok(f)
}

/// The body of [`INLINE_LOOKUP`] (`f`): see [`define_inline_lookup`].
fn write_inline_lookup<'ctx>(
    ir: &Ir<'_, 'ctx>,
    f: FunctionValue<'ctx>,
    lookup: FunctionValue<'ctx>,
    mutant: Option<Mutant>,
) -> Result<(), BuilderError> {
    let i64 = ir.i64_type();
    let param = |i: u32| f.get_nth_param(i).expect("declared above");
    let p = param(0).into_pointer_value();
    let memo = param(1).into_pointer_value();
    let state = State::from_values((2..).map(|i| param(i).into_int_value()));

    let block = |name| ir.append_block(f, name);
    let entry = block("entry");
    let (memo_second, hit_first, hit_second) = (
        block("memo.second"),
        block("memo.first.hit"),
        block("memo.second.hit"),
    );
    let (range, in_range, from_rows, indexed, probe, search, unchanged) = (
        block("range"),
        block("in_range"),
        block("rows"),
        block("indexed"),
        block("probe"),
        block("search"),
        block("unchanged"),
    );
    let (remember, done) = (block("remember"), block("done"));
    let b = ir.builder();

    // The memo: the site's last two keys and answers (stack words, kept in registers
    // once SROA has run).
    b.position_at_end(entry);
    let key = b.build_ptr_to_int(p, i64, "key")?;
    let memo_word = |w: MemoWord, name: &str| ir.load_plain_at(&b, memo, w.offset(), name);
    let (key0, answer0) = (
        memo_word(MemoWord::Key0, "memo.key0")?,
        memo_word(MemoWord::Answer0, "memo.answer0")?,
    );
    let is_first = b.build_int_compare(IntPredicate::EQ, key, key0, "")?;
    b.build_conditional_branch(is_first, hit_first, memo_second)?;
    b.position_at_end(hit_first);
    b.build_unconditional_branch(done)?;

    b.position_at_end(memo_second);
    let (key1, answer1) = (
        memo_word(MemoWord::Key1, "memo.key1")?,
        memo_word(MemoWord::Answer1, "memo.answer1")?,
    );
    let is_second = b.build_int_compare(IntPredicate::EQ, key, key1, "")?;
    b.build_conditional_branch(is_second, hit_second, range)?;
    b.position_at_end(hit_second);
    b.build_unconditional_branch(done)?;

    // The head's range: a key outside it is no key of the table.
    b.position_at_end(range);
    let offset = b.build_int_sub(key, state.first_key, "")?;
    let span = b.build_not(state.span_complement, "span")?;
    let inside = b.build_int_compare(IntPredicate::ULE, offset, span, "inside")?;
    b.build_conditional_branch(inside, in_range, unchanged)?;

    b.position_at_end(in_range);
    let has_rows = b.build_int_compare(IntPredicate::NE, state.rows_here, i64.const_zero(), "")?;
    b.build_conditional_branch(has_rows, from_rows, indexed)?;

    // A small table: its rows, all compared (FptrHead::answer).
    b.position_at_end(from_rows);
    let mut row_result = key;
    for (row_key, target) in state.rows {
        row_result = pick(&b, key, row_key, target, row_result)?;
    }
    b.build_unconditional_branch(remember)?;

    b.position_at_end(indexed);
    b.build_conditional_branch(state.index_valid, probe, search)?;

    // The index: both candidate buckets, every slot compared (IndexView::translate).
    b.position_at_end(probe);
    let mut probe_result = key;
    let buckets_read = match mutant {
        Some(Mutant::FirstBucketOnly) => 1,
        _ => state.seeds.len(),
    };
    for seed in state.seeds.into_iter().take(buckets_read) {
        let bucket = bucket_address(ir, &b, key, seed, state.bucket_count, state.buckets)?;
        for slot in 0..SLOTS {
            let at = (slot * size_of::<FptrMapEntry>()) as u64;
            let slot_key = ir.load_invariant_at(
                &b,
                bucket,
                at + offset_of!(FptrMapEntry, host_ptr) as u64,
                "slot.key",
            )?;
            let target = ir.load_invariant_at(
                &b,
                bucket,
                at + offset_of!(FptrMapEntry, tgt_ptr) as u64,
                "slot.target",
            )?;
            probe_result = pick(&b, key, slot_key, target, probe_result)?;
        }
    }
    b.build_unconditional_branch(remember)?;

    // No index: the device RTL's search, out of line.
    b.position_at_end(search);
    let searched = ir.call_pointer_function(&b, lookup, p)?;
    let searched = b.build_ptr_to_int(searched, i64, "")?;
    b.build_unconditional_branch(remember)?;

    // Outside the head's range: no key of the table.
    b.position_at_end(unchanged);
    b.build_unconditional_branch(remember)?;

    // A new answer displaces the older of the two.
    b.position_at_end(remember);
    let found = b.build_phi(i64, "found")?;
    found.add_incoming(&[
        (&row_result, from_rows),
        (&probe_result, probe),
        (&searched, search),
        (&key, unchanged),
    ]);
    let found = found.as_basic_value().into_int_value();
    for (word, value) in [
        (MemoWord::Key1, key0),
        (MemoWord::Answer1, answer0),
        (MemoWord::Key0, key),
        (MemoWord::Answer0, found),
    ] {
        ir.store_at(&b, memo, word.offset(), value)?;
    }
    b.build_unconditional_branch(done)?;

    // A match returns the target; no match keeps the argument itself (and its
    // provenance), as the device RTL does.
    b.position_at_end(done);
    let answer = b.build_phi(i64, "answer")?;
    let second_answer = match mutant {
        Some(Mutant::MemoSecondAnswer) => answer0,
        _ => answer1,
    };
    answer.add_incoming(&[
        (&answer0, hit_first),
        (&second_answer, hit_second),
        (&found, remember),
    ]);
    let answer = answer.as_basic_value().into_int_value();
    let matched = b.build_int_compare(IntPredicate::NE, answer, key, "")?;
    let target = b.build_int_to_ptr(answer, ir.ptr_type(), "target")?;
    let result = b.build_select(matched, target, p, "translated")?;
    b.build_return(Some(&result))?;
    Ok(())
}

/// `slot_key == key ? target : so_far`.
fn pick<'ctx>(
    b: &Builder<'ctx>,
    key: IntValue<'ctx>,
    slot_key: IntValue<'ctx>,
    target: IntValue<'ctx>,
    so_far: IntValue<'ctx>,
) -> Result<IntValue<'ctx>, BuilderError> {
    let same = b.build_int_compare(IntPredicate::EQ, slot_key, key, "")?;
    Ok(b.build_select(same, target, so_far, "")?.into_int_value())
}

/// The address of `key`'s bucket for `seed` (`index::bucket_of`: the high 64 bits of
/// `(key * seed) * count`).
fn bucket_address<'ctx>(
    ir: &Ir<'_, 'ctx>,
    b: &Builder<'ctx>,
    key: IntValue<'ctx>,
    seed: IntValue<'ctx>,
    count: IntValue<'ctx>,
    buckets: IntValue<'ctx>,
) -> Result<PointerValue<'ctx>, BuilderError> {
    let (i64, i128) = (ir.i64_type(), ir.i128_type());
    let mixed = b.build_int_mul(key, seed, "")?;
    let wide = b.build_int_mul(
        b.build_int_z_extend(mixed, i128, "")?,
        b.build_int_z_extend(count, i128, "")?,
        "",
    )?;
    let high = b.build_right_shift(wide, i128.const_int(64, false), false, "")?;
    let bucket = b.build_int_truncate(high, i64, "bucket")?;
    let offset = b.build_int_mul(bucket, i64.const_int(BUCKET_BYTES as u64, false), "")?;
    let address = b.build_int_add(buckets, offset, "")?;
    b.build_int_to_ptr(address, ir.ptr_type(), "bucket.address")
}
