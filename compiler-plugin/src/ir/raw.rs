//! What inkwell has no call for, on the raw C API. Each function says why inkwell's
//! own cannot serve.
use super::Value;
use llvm_plugin::inkwell::llvm_sys::core::*;
use llvm_plugin::inkwell::llvm_sys::debuginfo::{
    LLVMInstructionGetDebugLoc, LLVMInstructionSetDebugLoc,
};
use llvm_plugin::inkwell::llvm_sys::prelude::LLVMValueRef;
use llvm_plugin::inkwell::llvm_sys::{LLVMOpcode, LLVMTypeKind};
use llvm_plugin::inkwell::module::Module;
use llvm_plugin::inkwell::types::AsTypeRef;
use llvm_plugin::inkwell::types::BasicTypeEnum;
use llvm_plugin::inkwell::values::{
    ArrayValue, AsValueRef, BasicValueEnum, FunctionValue, GlobalValue, InstructionOpcode,
    InstructionValue, MetadataValue,
};
use std::marker::PhantomData;
use std::mem::ManuallyDrop;

pub type ValueRef = LLVMValueRef;

/// The classes `is_a` tells apart.
pub enum Class {
    Constant,
    ConstantPointerNull,
    InlineAsm,
}

/// inkwell's `is_const`/`is_null` exist only on its typed values (and `is_null`
/// tests for any null constant, not a `ConstantPointerNull`); an operand or callee
/// may be of any type.
pub fn is_a(v: Value<'_>, class: Class) -> bool {
    // SAFETY: `v` is a live value of the module; the isa<> checks only inspect it.
    let found = unsafe {
        match class {
            Class::Constant => LLVMIsAConstant(v.raw),
            Class::ConstantPointerNull => LLVMIsAConstantPointerNull(v.raw),
            Class::InlineAsm => LLVMIsAInlineAsm(v.raw),
        }
    };
    !found.is_null()
}

/// inkwell views instructions only as its typed values or through
/// `as_instruction_value` on them, whose construction panics on token-typed values.
pub fn as_instruction<'ctx>(v: Value<'ctx>) -> Option<InstructionValue<'ctx>> {
    // SAFETY: `v` is a live value; it is wrapped only when LLVM says it is an
    // instruction, which is what InstructionValue requires.
    unsafe {
        let inst = LLVMIsAInstruction(v.raw);
        (!inst.is_null()).then(|| InstructionValue::new(inst))
    }
}

/// inkwell's `BasicValueEnum::new` panics on values of types it does not model
/// (void, token, label, metadata, bfloat, scalable vectors): the type is checked
/// first, against the kinds it does model.
pub fn as_basic<'ctx>(v: Value<'ctx>) -> Option<BasicValueEnum<'ctx>> {
    // SAFETY: `v` is a live value; its type is owned by the context; it is wrapped
    // only when its type is one BasicValueEnum models.
    unsafe {
        let basic = matches!(
            LLVMGetTypeKind(LLVMTypeOf(v.raw)),
            LLVMTypeKind::LLVMHalfTypeKind
                | LLVMTypeKind::LLVMFloatTypeKind
                | LLVMTypeKind::LLVMDoubleTypeKind
                | LLVMTypeKind::LLVMX86_FP80TypeKind
                | LLVMTypeKind::LLVMFP128TypeKind
                | LLVMTypeKind::LLVMPPC_FP128TypeKind
                | LLVMTypeKind::LLVMIntegerTypeKind
                | LLVMTypeKind::LLVMStructTypeKind
                | LLVMTypeKind::LLVMPointerTypeKind
                | LLVMTypeKind::LLVMArrayTypeKind
                | LLVMTypeKind::LLVMVectorTypeKind
        );
        basic.then(|| BasicValueEnum::new(v.raw))
    }
}

pub enum GlobalKind {
    Any,
    Variable,
}

/// inkwell hands out globals only from the module's lists and lookups by name; an
/// operand that is a global needs the isa<> check.
pub fn as_global<'ctx>(v: Value<'ctx>, kind: GlobalKind) -> Option<GlobalValue<'ctx>> {
    // SAFETY: `v` is a live value; it is wrapped only when LLVM says it is a global
    // value (variable), which is what GlobalValue requires.
    unsafe {
        let global = match kind {
            GlobalKind::Any => LLVMIsAGlobalValue(v.raw),
            GlobalKind::Variable => LLVMIsAGlobalVariable(v.raw),
        };
        (!global.is_null()).then(|| GlobalValue::new(global))
    }
}

/// As [`as_global`], for functions (inkwell's `FunctionValue::new` asserts).
pub fn as_function<'ctx>(v: Value<'ctx>) -> Option<FunctionValue<'ctx>> {
    // SAFETY: `v` is a live value; it is wrapped only when LLVM says it is a
    // function.
    unsafe { FunctionValue::new(LLVMIsAFunction(v.raw)) }
}

/// inkwell has no way from a function to its module.
pub fn parent_module<'ctx>(function: FunctionValue<'ctx>) -> ManuallyDrop<Module<'ctx>> {
    // SAFETY: the pass manager hands a function pass a live function of a live
    // module it owns; ManuallyDrop keeps inkwell from disposing of that module.
    unsafe { ManuallyDrop::new(Module::new(LLVMGetGlobalParent(function.as_value_ref()))) }
}

/// inkwell reads operands of instructions only, not of constant aggregates or
/// constant expressions.
pub fn constant_operand<'ctx>(v: Value<'ctx>, i: u32) -> Option<Value<'ctx>> {
    (i < constant_num_operands(v)).then(|| Value {
        // SAFETY: `v` is a live user with more than `i` operands.
        raw: unsafe { LLVMGetOperand(v.raw, i) },
        context: PhantomData,
    })
}

/// As [`constant_operand`]; 0 for values that are not users.
pub fn constant_num_operands(v: Value<'_>) -> u32 {
    // SAFETY: `v` is a live value; it is read only when it is a user.
    unsafe {
        if LLVMIsAUser(v.raw).is_null() {
            return 0;
        }
        LLVMGetNumOperands(v.raw) as u32
    }
}

/// inkwell has no view of constant expressions. The opcode of `v` when it is a
/// constant expression the passes look through (a bitcast, an addrspacecast, a GEP);
/// None for any other value.
pub fn constant_expression_opcode(v: Value<'_>) -> Option<InstructionOpcode> {
    // SAFETY: `v` is a live value; its opcode is read only when it is a constant
    // expression.
    let opcode = unsafe {
        let expr = LLVMIsAConstantExpr(v.raw);
        if expr.is_null() {
            return None;
        }
        LLVMGetConstOpcode(expr)
    };
    match opcode {
        LLVMOpcode::LLVMBitCast => Some(InstructionOpcode::BitCast),
        LLVMOpcode::LLVMAddrSpaceCast => Some(InstructionOpcode::AddrSpaceCast),
        LLVMOpcode::LLVMGetElementPtr => Some(InstructionOpcode::GetElementPtr),
        _ => None,
    }
}

/// inkwell's `is_const_string` calls `LLVMIsConstantString` on any array (undefined
/// for a `zeroinitializer`), and `get_string_constant` reads up to a NUL, past the
/// end of a string without one.
pub fn constant_string_bytes(v: Value<'_>) -> Option<Vec<u8>> {
    // SAFETY: `v` is a live constant; it is read as a string only when it is a
    // ConstantDataSequential that is a string, and LLVM returns `len` bytes that
    // constant owns, copied out before returning.
    unsafe {
        let data = LLVMIsAConstantDataSequential(v.raw);
        if data.is_null() || LLVMIsConstantString(data) == 0 {
            return None;
        }
        let mut len = 0usize;
        let ptr = LLVMGetAsString(data, &mut len);
        Some(std::slice::from_raw_parts(ptr.cast::<u8>(), len).to_vec())
    }
}

/// inkwell's `get_string_value` stops at a NUL; an MDString has a length.
pub fn metadata_string(node: MetadataValue<'_>) -> Option<String> {
    let mut len = 0u32;
    // SAFETY: `node` is a live metadata value; LLVMGetMDString returns null unless
    // it is an MDString, else `len` bytes the context owns.
    let ptr = unsafe { LLVMGetMDString(node.as_value_ref(), &mut len) };
    if ptr.is_null() {
        return None;
    }
    // SAFETY: as above; the bytes are copied before returning.
    let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len as usize) };
    Some(String::from_utf8_lossy(bytes).into_owned())
}

/// inkwell's `BasicValueUse::get_user` builds an `AnyValueEnum`, which panics on
/// token-typed users.
pub fn users<'ctx>(v: Value<'ctx>) -> Vec<Value<'ctx>> {
    let mut out = Vec::new();
    // SAFETY: `v` is a live value; the walk reads its use list, which the caller
    // changes only after the walk.
    unsafe {
        let mut u = LLVMGetFirstUse(v.raw);
        while !u.is_null() {
            out.push(Value {
                raw: LLVMGetUser(u),
                context: PhantomData,
            });
            u = LLVMGetNextUse(u);
        }
    }
    out
}

/// inkwell's arrays of constants are typed (`PointerType::const_array` takes
/// `PointerValue`s, ...); the elements here are taken from an array of this type.
pub fn constant_array<'ctx>(
    element_type: BasicTypeEnum<'ctx>,
    elements: &[Value<'ctx>],
) -> ArrayValue<'ctx> {
    let elements: Vec<LLVMValueRef> = elements.iter().map(|v| v.raw).collect();
    // SAFETY: every element is a constant of `element_type` (the old array's
    // elements, or pointers cast to the pointer type).
    unsafe { ArrayValue::new_raw_const_array(element_type.as_type_ref(), &elements) }
}

/// inkwell's `Module::run_passes` wants a target machine, which a pass plugin does
/// not have (and these passes do not need).
pub fn run_passes(module: &Module<'_>, passes: &str) -> Result<(), String> {
    use llvm_plugin::inkwell::llvm_sys::error::{LLVMDisposeErrorMessage, LLVMGetErrorMessage};
    use llvm_plugin::inkwell::llvm_sys::transforms::pass_builder::{
        LLVMCreatePassBuilderOptions, LLVMDisposePassBuilderOptions, LLVMRunPasses,
    };
    let passes = std::ffi::CString::new(passes).map_err(|e| e.to_string())?;
    // SAFETY: the module is the live module of this pass; the options are created and
    // disposed here; a null target machine is allowed (the pass builder then uses
    // none); an error is read once and disposed.
    unsafe {
        let options = LLVMCreatePassBuilderOptions();
        let error = LLVMRunPasses(
            module.as_mut_ptr(),
            passes.as_ptr(),
            std::ptr::null_mut(),
            options,
        );
        LLVMDisposePassBuilderOptions(options);
        if error.is_null() {
            return Ok(());
        }
        let message = LLVMGetErrorMessage(error);
        let text = std::ffi::CStr::from_ptr(message)
            .to_string_lossy()
            .into_owned();
        LLVMDisposeErrorMessage(message);
        Err(text)
    }
}

/// inkwell reads no instruction's debug location.
pub fn copy_debug_location(from: InstructionValue<'_>, to: InstructionValue<'_>) {
    // SAFETY: both are live instructions of this module; the location is metadata
    // of its context.
    unsafe {
        let loc = LLVMInstructionGetDebugLoc(from.as_value_ref());
        if !loc.is_null() {
            LLVMInstructionSetDebugLoc(to.as_value_ref(), loc);
        }
    }
}
