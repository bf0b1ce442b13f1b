//! [`Ir`]'s building of new code: the types, functions, blocks, loads and stores that
//! inline_lookup.rs writes, and the always-inliner that folds its helpers into their
//! callers.
use super::{raw, Ir, Value};
use llvm_plugin::inkwell::attributes::{Attribute, AttributeLoc};
use llvm_plugin::inkwell::basic_block::BasicBlock;
use llvm_plugin::inkwell::builder::{Builder, BuilderError};
use llvm_plugin::inkwell::module::Linkage;
use llvm_plugin::inkwell::types::{FunctionType, IntType};
use llvm_plugin::inkwell::values::{
    BasicMetadataValueEnum as BasicMetadataValue, BasicValue, FunctionValue, GlobalValue,
    InstructionOpcode, InstructionValue, IntValue, PointerValue,
};

impl<'ctx> Ir<'_, 'ctx> {
    pub fn i64_type(&self) -> IntType<'ctx> {
        self.context.i64_type()
    }

    pub fn i128_type(&self) -> IntType<'ctx> {
        self.context.i128_type()
    }

    pub fn bool_type(&self) -> IntType<'ctx> {
        self.context.bool_type()
    }

    pub fn builder(&self) -> Builder<'ctx> {
        self.context.create_builder()
    }

    pub fn add_function(
        &self,
        name: &str,
        ty: FunctionType<'ctx>,
        linkage: Linkage,
    ) -> FunctionValue<'ctx> {
        self.module.add_function(name, ty, Some(linkage))
    }

    pub fn append_block(&self, function: FunctionValue<'ctx>, name: &str) -> BasicBlock<'ctx> {
        self.context.append_basic_block(function, name)
    }

    /// Delete `function`, which nothing uses (a helper abandoned half-built).
    pub fn delete_function(&self, function: FunctionValue<'ctx>) {
        // SAFETY: `function` is a function of this module without users; the caller
        // deletes it once and drops its handle.
        unsafe { function.delete() }
    }

    /// `alwaysinline nounwind`: for a helper that LLVM's always-inliner writes out.
    pub fn mark_always_inline(&self, function: FunctionValue<'ctx>) {
        for name in ["alwaysinline", "nounwind"] {
            let kind = Attribute::get_named_enum_kind_id(name);
            let attribute = self.context.create_enum_attribute(kind, 0);
            function.add_attribute(AttributeLoc::Function, attribute);
        }
    }

    /// The global `name` of the module, or an external declaration of `bytes` bytes (as
    /// 8-byte words) when there is none.
    pub fn get_or_declare_words(&self, name: &str, bytes: usize) -> GlobalValue<'ctx> {
        self.global(name).unwrap_or_else(|| {
            let ty = self.context.i64_type().array_type((bytes / 8) as u32);
            let g = self.module.add_global(ty, None, name);
            g.set_linkage(Linkage::External);
            g
        })
    }

    /// A builder before the first instruction of `function`'s entry block that is not an
    /// alloca (what is loaded there is loaded once per call of the function).
    pub fn builder_at_entry(&self, function: FunctionValue<'ctx>) -> Builder<'ctx> {
        let builder = self.builder();
        let entry = function
            .get_first_basic_block()
            .expect("a defined function has an entry block");
        let first = entry
            .get_instructions()
            .find(|i| i.get_opcode() != InstructionOpcode::Alloca);
        match first {
            Some(i) => builder.position_before(&i),
            None => builder.position_at_end(entry),
        }
        builder
    }

    /// The 8-byte word at `offset` bytes from `base`, as an invariant load: memory
    /// nothing writes while the code that loads it runs.
    pub fn load_invariant_at(
        &self,
        builder: &Builder<'ctx>,
        base: PointerValue<'ctx>,
        offset: u64,
        name: &str,
    ) -> Result<IntValue<'ctx>, BuilderError> {
        let load = self.load_plain_at(builder, base, offset, name)?;
        if let Some(inst) = load.as_instruction() {
            let kind = self.context.get_kind_id("invariant.load");
            let empty = self.context.metadata_node(&[]);
            // Only fails for a value that is not an instruction.
            let _ = inst.set_metadata(empty, kind);
        }
        Ok(load)
    }

    /// The 8-byte word at `offset` bytes from `base` (memory the code may write), an
    /// 8-byte-aligned load.
    pub fn load_plain_at(
        &self,
        builder: &Builder<'ctx>,
        base: PointerValue<'ctx>,
        offset: u64,
        name: &str,
    ) -> Result<IntValue<'ctx>, BuilderError> {
        let address = self.byte_offset(builder, base, offset)?;
        let load = builder.build_load(self.context.i64_type(), address, name)?;
        if let Some(inst) = load.as_instruction_value() {
            inst.set_alignment(8)
                .map_err(|_| BuilderError::AlignmentError("load"))?;
        }
        Ok(load.into_int_value())
    }

    /// Store the 8-byte `value` at `offset` bytes from `base`.
    pub fn store_at(
        &self,
        builder: &Builder<'ctx>,
        base: PointerValue<'ctx>,
        offset: u64,
        value: IntValue<'ctx>,
    ) -> Result<(), BuilderError> {
        let address = self.byte_offset(builder, base, offset)?;
        builder.build_store(address, value)?;
        Ok(())
    }

    /// `base + offset` bytes.
    fn byte_offset(
        &self,
        builder: &Builder<'ctx>,
        base: PointerValue<'ctx>,
        offset: u64,
    ) -> Result<PointerValue<'ctx>, BuilderError> {
        let i8 = self.context.i8_type();
        let offset = self.context.i64_type().const_int(offset, false);
        // SAFETY: a byte offset without `inbounds`: LLVM assumes nothing from it (callers
        // pass offsets inside the object they then read or write).
        unsafe { builder.build_gep(i8, base, &[offset], "") }
    }

    /// `words` 8-byte words on `function`'s stack, zeroed at its entry.
    pub fn zeroed_entry_words(
        &self,
        function: FunctionValue<'ctx>,
        words: u32,
        name: &str,
    ) -> Result<PointerValue<'ctx>, BuilderError> {
        let builder = self.builder_at_entry(function);
        let i64 = self.context.i64_type();
        let slots = builder.build_alloca(i64.array_type(words), name)?;
        for w in 0..u64::from(words) {
            self.store_at(&builder, slots, 8 * w, i64.const_zero())?;
        }
        Ok(slots)
    }

    /// `call ptr function(ptr argument)` at the builder's position.
    pub fn call_pointer_function(
        &self,
        builder: &Builder<'ctx>,
        function: FunctionValue<'ctx>,
        argument: PointerValue<'ctx>,
    ) -> Result<PointerValue<'ctx>, BuilderError> {
        let call = builder.build_call(function, &[argument.into()], "searched")?;
        call.try_as_basic_value()
            .left()
            .map(|v| v.into_pointer_value())
            .ok_or(BuilderError::ValueTypeMismatch(
                "the lookup returns a pointer",
            ))
    }

    /// Replace the one-argument `call` with a call of `with(argument, extra...)`, keeping
    /// its debug location; false (nothing done) when `call` has no pointer argument.
    pub fn replace_call(
        &self,
        call: InstructionValue<'ctx>,
        with: FunctionValue<'ctx>,
        extra: &[BasicMetadataValue<'ctx>],
    ) -> bool {
        let Some(argument) = self.first_argument(call).and_then(Value::basic) else {
            return false;
        };
        let builder = self.builder();
        builder.position_before(&call);
        let mut arguments = vec![argument.into()];
        arguments.extend_from_slice(extra);
        let Ok(replacement) = builder.build_call(with, &arguments, "translated") else {
            return false;
        };
        let Some(new) = Value::of(replacement).instruction() else {
            return false;
        };
        raw::copy_debug_location(call, new);
        call.replace_all_uses_with(&new);
        call.erase_from_basic_block();
        true
    }

    /// LLVM's always-inliner over the module, then SROA (what the inlined code keeps on
    /// the stack goes to registers); the new pass manager, without a target machine
    /// (neither pass needs one).
    pub fn run_always_inliner(&self) -> Result<(), String> {
        raw::run_passes(&self.module, "always-inline,function(sroa)")
    }
}
