//! The few LLVM operations the passes need, on inkwell: typed handles (`GlobalValue`,
//! `FunctionValue`, `InstructionValue`) tied by `'ctx` to the module's context, and
//! [`Value`] for any value of the module (an operand, a user).
//!
//! Raw `llvm_sys` is left only in the [`raw`] module, for what inkwell has no call for
//! (or has one that panics or reads out of bounds on values these passes meet); each
//! function there says which. Every handle comes from the module the pass manager gave
//! the pass (or was just created in it), and the pass holds the module for the whole
//! run, so each handle is valid and unaliased by other threads for as long as these
//! functions use it.
//!
//! This file holds the handles ([`Ir`], [`Value`]) and what describes the module as a
//! whole; [`Ir`]'s other operations are split by what they work on, one file each:
//! `globals.rs` (the module's globals: lookups, edits, new ones), `values.rs` (reading
//! operands and constants), `instructions.rs` (finding and rewriting the calls and
//! loads the passes translate) and `codegen.rs` (building the new code of
//! inline_lookup.rs).
mod codegen;
mod globals;
mod instructions;
mod raw;
mod values;

pub use globals::EntryFieldValue;

use llvm_plugin::inkwell::context::ContextRef;
use llvm_plugin::inkwell::module::Module;
use llvm_plugin::inkwell::values::{
    AnyValue, BasicValueEnum, FunctionValue, GlobalValue, InstructionValue,
};
use llvm_plugin::inkwell::AddressSpace;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ops::Deref;

/// Any value of the module being transformed, compared by identity. inkwell's own value
/// enums are typed by the value's type and panic on some (token, metadata); operands and
/// users can be of any type, so they travel as this and are viewed as inkwell values
/// where one is needed ([`Value::instruction`], [`Value::basic`], ...).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Value<'ctx> {
    raw: raw::ValueRef,
    context: PhantomData<ContextRef<'ctx>>,
}

impl<'ctx> Value<'ctx> {
    /// Any inkwell value of the module (of the same context).
    pub fn of(value: impl AnyValue<'ctx>) -> Value<'ctx> {
        Value {
            raw: value.as_value_ref(),
            context: PhantomData,
        }
    }

    pub fn instruction(self) -> Option<InstructionValue<'ctx>> {
        raw::as_instruction(self)
    }

    /// The value as one of inkwell's first-class values, if its type is one.
    pub fn basic(self) -> Option<BasicValueEnum<'ctx>> {
        raw::as_basic(self)
    }

    pub fn global(self) -> Option<GlobalValue<'ctx>> {
        raw::as_global(self, raw::GlobalKind::Any)
    }

    pub fn function(self) -> Option<FunctionValue<'ctx>> {
        raw::as_function(self)
    }
}

/// The module a pass runs on: the pass's own, or (for a function pass) the function's.
enum ModuleHandle<'m, 'ctx> {
    Pass(&'m Module<'ctx>),
    /// Never dropped: the pass manager owns the module.
    Parent(ManuallyDrop<Module<'ctx>>),
}

impl<'ctx> Deref for ModuleHandle<'_, 'ctx> {
    type Target = Module<'ctx>;
    fn deref(&self) -> &Module<'ctx> {
        match self {
            ModuleHandle::Pass(module) => module,
            ModuleHandle::Parent(module) => module,
        }
    }
}

/// The module a pass runs on.
pub struct Ir<'m, 'ctx> {
    module: ModuleHandle<'m, 'ctx>,
    context: ContextRef<'ctx>,
}

impl<'m, 'ctx> Ir<'m, 'ctx> {
    pub fn new(module: &'m Module<'ctx>) -> Ir<'m, 'ctx> {
        Ir {
            context: module.get_context(),
            module: ModuleHandle::Pass(module),
        }
    }

    /// The module that holds `function` (a function pass's view of its module).
    pub fn of_function(function: FunctionValue<'ctx>) -> Ir<'ctx, 'ctx> {
        let module = raw::parent_module(function);
        Ir {
            context: module.get_context(),
            module: ModuleHandle::Parent(module),
        }
    }

    /// The module's `source_filename`.
    pub fn source_file_name(&self) -> String {
        self.module
            .get_source_file_name()
            .to_string_lossy()
            .into_owned()
    }

    /// True when the module has module flag `key` (clang marks device modules with
    /// `openmp-device`).
    pub fn has_module_flag(&self, key: &str) -> bool {
        self.module.get_flag(key).is_some()
    }

    /// The module's target triple.
    pub fn triple(&self) -> String {
        self.module
            .get_triple()
            .as_str()
            .to_string_lossy()
            .into_owned()
    }

    /// The address space data-layout component `G<n>` puts globals in (0 if absent).
    pub fn globals_address_space(&self) -> AddressSpace {
        let layout = self.module.get_data_layout();
        layout
            .as_str()
            .to_string_lossy()
            .split('-')
            .find_map(|part| {
                AddressSpace::try_from(part.strip_prefix('G')?.parse::<u32>().ok()?).ok()
            })
            .unwrap_or_default()
    }
}
