//! [`Ir`]'s reads of values of any kind: operands of instructions and constants, casts
//! and GEPs looked through, what a value is (a constant, a global, an alloca, inline
//! asm) and who uses it. Nothing here changes the module.
use super::{raw, Ir, Value};
use llvm_plugin::inkwell::values::{BasicValueEnum, InstructionOpcode};
use llvm_plugin::inkwell::AddressSpace;

impl<'ctx> Ir<'_, 'ctx> {
    /// Operand `i` of a constant aggregate, constant expression or instruction.
    pub fn operand(&self, v: Value<'ctx>, i: u32) -> Option<Value<'ctx>> {
        match v.instruction() {
            Some(inst) => inst.get_operand(i)?.left().map(Value::of),
            None => raw::constant_operand(v, i),
        }
    }

    pub fn num_operands(&self, v: Value<'ctx>) -> u32 {
        match v.instruction() {
            Some(inst) => inst.get_num_operands(),
            None => raw::constant_num_operands(v),
        }
    }

    /// `v` with pointer casts (constant expressions included) looked through.
    pub fn strip_casts(&self, mut v: Value<'ctx>) -> Value<'ctx> {
        loop {
            match raw::constant_expression_opcode(v) {
                Some(InstructionOpcode::BitCast | InstructionOpcode::AddrSpaceCast) => {
                    match self.operand(v, 0) {
                        Some(operand) => v = operand,
                        None => return v,
                    }
                }
                _ => return v,
            }
        }
    }

    /// The value of an integer constant (zero-extended), None for anything else.
    pub fn constant_int(&self, v: Value<'ctx>) -> Option<u64> {
        match v.basic()? {
            BasicValueEnum::IntValue(int) => int.get_zero_extended_constant(),
            _ => None,
        }
    }

    /// The instructions and constants that use `v`.
    pub fn users(&self, v: Value<'ctx>) -> Vec<Value<'ctx>> {
        raw::users(v)
    }

    /// True when `v`'s type is a pointer or an integer (what a vtable slot holds).
    pub fn is_pointer_or_integer(&self, v: Value<'ctx>) -> bool {
        matches!(
            v.basic(),
            Some(BasicValueEnum::PointerValue(_) | BasicValueEnum::IntValue(_))
        )
    }

    pub fn is_alloca(&self, v: Value<'ctx>) -> bool {
        v.instruction()
            .is_some_and(|inst| inst.get_opcode() == InstructionOpcode::Alloca)
    }

    /// The base pointer of a `getelementptr` instruction whose indices are all
    /// constants (a fixed offset), if `v` is one.
    pub fn constant_offset_base(&self, v: Value<'ctx>) -> Option<Value<'ctx>> {
        let gep = v
            .instruction()
            .filter(|inst| inst.get_opcode() == InstructionOpcode::GetElementPtr)?;
        (1..gep.get_num_operands())
            .all(|i| {
                self.operand(v, i)
                    .is_some_and(|index| self.is_constant(index))
            })
            .then(|| self.operand(v, 0))
            .flatten()
    }

    /// `v` with GEPs and pointer casts (constant or instruction) looked
    /// through: the object an address points into.
    pub fn underlying_object(&self, mut v: Value<'ctx>) -> Value<'ctx> {
        loop {
            v = self.strip_casts(v);
            let steps_through = match v.instruction() {
                Some(inst) => matches!(
                    inst.get_opcode(),
                    InstructionOpcode::GetElementPtr
                        | InstructionOpcode::BitCast
                        | InstructionOpcode::AddrSpaceCast
                ),
                None => {
                    raw::constant_expression_opcode(v) == Some(InstructionOpcode::GetElementPtr)
                }
            };
            match steps_through.then(|| self.operand(v, 0)).flatten() {
                Some(next) => v = next,
                None => return v,
            }
        }
    }

    /// True for a global value (function, variable, alias) or a null pointer.
    pub fn is_global_or_null(&self, v: Value<'ctx>) -> bool {
        v.global().is_some() || raw::is_a(v, raw::Class::ConstantPointerNull)
    }

    /// True for a callee known before run time: a function, an alias, any constant.
    pub fn is_constant(&self, v: Value<'ctx>) -> bool {
        raw::is_a(v, raw::Class::Constant)
    }

    pub fn is_inline_asm(&self, v: Value<'ctx>) -> bool {
        raw::is_a(v, raw::Class::InlineAsm)
    }

    /// The address space of a pointer-typed value (None if it is not a pointer).
    pub fn pointer_address_space(&self, v: Value<'ctx>) -> Option<AddressSpace> {
        match v.basic()? {
            BasicValueEnum::PointerValue(p) => Some(p.get_type().get_address_space()),
            _ => None,
        }
    }
}
