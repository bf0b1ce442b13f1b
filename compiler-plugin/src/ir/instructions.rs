//! [`Ir`]'s view of the instructions of existing functions: finding the calls and
//! loads the passes translate, reading what they call or load, and rewriting them in
//! place (a lookup call put before or after them, a call replaced).
use super::{raw, Ir, Value};
use llvm_plugin::inkwell::builder::Builder;
use llvm_plugin::inkwell::types::FunctionType;
use llvm_plugin::inkwell::values::{
    BasicMetadataValueEnum as BasicMetadataValue, BasicValueEnum, CallSiteValue, FunctionValue,
    InstructionOpcode, InstructionValue,
};

impl<'ctx> Ir<'_, 'ctx> {
    /// Every instruction of `function` with one of `opcodes`, in order.
    fn instructions(
        &self,
        function: FunctionValue<'ctx>,
        opcodes: &[InstructionOpcode],
    ) -> Vec<InstructionValue<'ctx>> {
        function
            .get_basic_block_iter()
            .flat_map(|block| block.get_instructions())
            .filter(|inst| opcodes.contains(&inst.get_opcode()))
            .collect()
    }

    /// Every call and invoke instruction of `function`.
    pub fn call_sites(&self, function: FunctionValue<'ctx>) -> Vec<InstructionValue<'ctx>> {
        self.instructions(
            function,
            &[InstructionOpcode::Call, InstructionOpcode::Invoke],
        )
    }

    /// Every load instruction of `function`.
    pub fn loads(&self, function: FunctionValue<'ctx>) -> Vec<InstructionValue<'ctx>> {
        self.instructions(function, &[InstructionOpcode::Load])
    }

    /// The instruction `v` is a load, if it is one.
    pub fn as_load(&self, v: Value<'ctx>) -> Option<InstructionValue<'ctx>> {
        v.instruction()
            .filter(|inst| inst.get_opcode() == InstructionOpcode::Load)
    }

    /// The address a load reads.
    pub fn load_address(&self, load: InstructionValue<'ctx>) -> Option<Value<'ctx>> {
        self.operand(Value::of(load), 0)
    }

    /// The value a call or invoke calls: its last operand.
    pub fn callee(&self, call: InstructionValue<'ctx>) -> Option<Value<'ctx>> {
        let last = call.get_num_operands().checked_sub(1)?;
        self.operand(Value::of(call), last)
    }

    /// The first argument of a call.
    pub fn first_argument(&self, call: InstructionValue<'ctx>) -> Option<Value<'ctx>> {
        self.operand(Value::of(call), 0)
    }

    /// True when `v` is the result of a call to `function`.
    pub fn is_call_to(&self, v: Value<'ctx>, function: FunctionValue<'ctx>) -> bool {
        v.instruction()
            .filter(|inst| inst.get_opcode() == InstructionOpcode::Call)
            .and_then(|call| self.callee(call))
            == Some(Value::of(function))
    }

    /// The name of the type the instruction's TBAA access tag `!{base, access, offset}`
    /// accesses (clang tags vptr loads with "vtable pointer"); None without a tag.
    pub fn tbaa_access_type(&self, inst: InstructionValue<'ctx>) -> Option<String> {
        let tag = inst.get_metadata(self.context.get_kind_id("tbaa"))?;
        let node_operand = |node: BasicMetadataValue<'ctx>, i: usize| match node {
            BasicMetadataValue::MetadataValue(node) if node.is_node() => {
                node.get_node_values().get(i).copied()
            }
            _ => None,
        };
        let access = node_operand(BasicMetadataValue::MetadataValue(tag), 1)?;
        match node_operand(access, 0)? {
            BasicMetadataValue::MetadataValue(name) => raw::metadata_string(name),
            _ => None,
        }
    }

    /// Insert `%t = call ptr lookup(ptr value)` right after the instruction `value` and
    /// make every other use of `value` use `%t`. Returns `%t`.
    pub fn translate_after(
        &self,
        value: InstructionValue<'ctx>,
        lookup: FunctionValue<'ctx>,
        lookup_type: FunctionType<'ctx>,
    ) -> Option<InstructionValue<'ctx>> {
        // Callers pass loads, never terminators, so an instruction follows.
        let next = value.get_next_instruction()?;
        let argument = Value::of(value);
        let translated = self.lookup_call_before(next, argument, value, lookup, lookup_type)?;
        value.replace_all_uses_with(&translated);
        // The RAUW made the call its own argument: give it `value` back.
        translated.set_operand(0, argument.basic()?);
        Some(translated)
    }

    /// Insert `%t = call ptr lookup(ptr callee)` before `call` and make `call` call `%t`.
    pub fn translate_callee(
        &self,
        call: InstructionValue<'ctx>,
        lookup: FunctionValue<'ctx>,
        lookup_type: FunctionType<'ctx>,
    ) {
        let Some(callee) = self.callee(call) else {
            return;
        };
        let Some(translated) = self.lookup_call_before(call, callee, call, lookup, lookup_type)
        else {
            return;
        };
        // The callee is the last operand of calls and invokes alike.
        let last = call.get_num_operands() - 1;
        if let Some(translated) = Value::of(translated).basic() {
            call.set_operand(last, translated);
        }
    }

    /// `%t = call ptr lookup(ptr argument)` inserted before `before`, with the debug
    /// location of `located_as` (required for inlinable calls in functions with debug
    /// info).
    fn lookup_call_before(
        &self,
        before: InstructionValue<'ctx>,
        argument: Value<'ctx>,
        located_as: InstructionValue<'ctx>,
        lookup: FunctionValue<'ctx>,
        lookup_type: FunctionType<'ctx>,
    ) -> Option<InstructionValue<'ctx>> {
        let builder: Builder<'ctx> = self.context.create_builder();
        builder.position_before(&before);
        let lookup = lookup.as_global_value().as_pointer_value();
        let call: CallSiteValue<'ctx> = builder
            .build_indirect_call(
                lookup_type,
                lookup,
                &[argument.basic()?.into()],
                "translated",
            )
            .ok()?;
        let translated = Value::of(call).instruction()?;
        raw::copy_debug_location(located_as, translated);
        Some(translated)
    }

    /// Replace every use of the pointer-valued `call` with the pointer `with` and delete
    /// `call`; false (nothing done) when either is not a pointer.
    pub fn replace_and_erase(&self, call: InstructionValue<'ctx>, with: Value<'ctx>) -> bool {
        let (Some(BasicValueEnum::PointerValue(result)), Some(BasicValueEnum::PointerValue(with))) =
            (Value::of(call).basic(), with.basic())
        else {
            return false;
        };
        result.replace_all_uses_with(with);
        call.erase_from_basic_block();
        true
    }
}
