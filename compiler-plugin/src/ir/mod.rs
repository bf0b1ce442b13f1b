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
use llvm_plugin::inkwell::attributes::{Attribute, AttributeLoc};
use llvm_plugin::inkwell::basic_block::BasicBlock;
use llvm_plugin::inkwell::builder::{Builder, BuilderError};
use llvm_plugin::inkwell::context::ContextRef;
use llvm_plugin::inkwell::module::{Linkage, Module};
use llvm_plugin::inkwell::targets::TargetData;
use llvm_plugin::inkwell::types::{BasicType, FunctionType, IntType, PointerType};
use llvm_plugin::inkwell::values::{
    AnyValue, BasicMetadataValueEnum as BasicMetadataValue, BasicValue, BasicValueEnum,
    CallSiteValue, FunctionValue, GlobalValue, InstructionOpcode, InstructionValue, IntValue,
    PointerValue, UnnamedAddress,
};
use llvm_plugin::inkwell::{AddressSpace, GlobalVisibility};
use offload_formats::entries::{FieldKind, SECTION_LEGACY};
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ops::Deref;

/// The value of one field of an offload entry.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum EntryFieldValue<V> {
    /// A global's address.
    Pointer(V),
    Int(u64),
}

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

    pub fn global(&self, name: &str) -> Option<GlobalValue<'ctx>> {
        self.module.get_global(name)
    }

    pub fn function(&self, name: &str) -> Option<FunctionValue<'ctx>> {
        self.module.get_function(name)
    }

    pub fn functions(&self) -> Vec<FunctionValue<'ctx>> {
        self.module.get_functions().collect()
    }

    pub fn globals(&self) -> Vec<GlobalValue<'ctx>> {
        self.module.get_globals().collect()
    }

    /// True for a global this module defines for the link (not a declaration, nor an
    /// `available_externally` copy of one defined elsewhere).
    pub fn defines_for_link(&self, global: GlobalValue<'ctx>) -> bool {
        !global.is_declaration() && global.get_linkage() != Linkage::AvailableExternally
    }

    /// The bytes a global variable's value occupies (its type's ABI size).
    pub fn global_size(&self, global: GlobalValue<'ctx>) -> u64 {
        let layout = self.module.get_data_layout();
        let target_data = TargetData::create(&layout.as_str().to_string_lossy());
        target_data.get_abi_size(&global.get_value_type())
    }

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

    pub fn initializer(&self, global: GlobalValue<'ctx>) -> Option<Value<'ctx>> {
        global.get_initializer().map(Value::of)
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

    /// The section a global is placed in, if any.
    pub fn section(&self, global: GlobalValue<'ctx>) -> Option<String> {
        global
            .get_section()
            .map(|section| section.to_string_lossy().into_owned())
    }

    /// The value of an integer constant (zero-extended), None for anything else.
    pub fn constant_int(&self, v: Value<'ctx>) -> Option<u64> {
        match v.basic()? {
            BasicValueEnum::IntValue(int) => int.get_zero_extended_constant(),
            _ => None,
        }
    }

    /// The string a `[N x i8]` constant global holds (an annotation's text).
    pub fn c_string_of_global(&self, v: Value<'ctx>) -> Option<String> {
        let global = raw::as_global(self.strip_casts(v), raw::GlobalKind::Variable)?;
        let init = self.initializer(global)?;
        let bytes = raw::constant_string_bytes(init)?;
        let text = bytes.split(|&b| b == 0).next().unwrap_or_default();
        Some(String::from_utf8_lossy(text).into_owned())
    }

    pub fn name(&self, global: GlobalValue<'ctx>) -> String {
        global.get_name().to_string_lossy().into_owned()
    }

    pub fn is_declaration(&self, global: GlobalValue<'ctx>) -> bool {
        global.is_declaration()
    }

    pub fn has_local_linkage(&self, global: GlobalValue<'ctx>) -> bool {
        matches!(global.get_linkage(), Linkage::Internal | Linkage::Private)
    }

    /// Delete a global variable that nothing uses any more.
    pub fn delete_global(&self, global: GlobalValue<'ctx>) {
        // SAFETY: `global` is a global variable of this module; callers delete it only
        // once and drop every handle to it.
        unsafe { global.delete() }
    }

    /// Delete a global variable whose remaining users are dead constants (the entries
    /// of an annotation array just replaced): they are pointed at null first, so no
    /// constant is left referring to the deleted global.
    pub fn delete_global_with_dead_users(&self, global: GlobalValue<'ctx>) {
        let pointer = global.as_pointer_value();
        pointer.replace_all_uses_with(pointer.get_type().const_null());
        self.delete_global(global);
    }

    /// Replace `global`'s initializer (an array such as `llvm.global.annotations`) with
    /// the array of `elements`, taken from it, or delete `global` when `elements` is
    /// empty.
    pub fn replace_array_global(&self, global: GlobalValue<'ctx>, elements: &[Value<'ctx>]) {
        if elements.is_empty() {
            self.delete_global(global);
            return;
        }
        let element_type = self
            .initializer(global)
            .and_then(|init| match init.basic()? {
                BasicValueEnum::ArrayValue(array) => Some(array.get_type().get_element_type()),
                _ => None,
            });
        let Some(element_type) = element_type else {
            return;
        };
        let name = self.name(global);
        let init = raw::constant_array(element_type, elements);
        // The old global gives its name up so the new one takes it; it has no users
        // besides being a named root, so deleting it is sound.
        global.set_name(&format!("{name}.old"));
        let replacement = self.module.add_global(init.get_type(), None, &name);
        replacement.set_initializer(&init);
        replacement.set_linkage(global.get_linkage());
        if let Some(section) = global.get_section() {
            replacement.set_section(Some(&section.to_string_lossy()));
        }
        self.delete_global(global);
    }

    pub fn ptr_type(&self) -> PointerType<'ctx> {
        self.context.ptr_type(AddressSpace::default())
    }

    /// A private, unnamed_addr constant C string.
    pub fn add_c_string(&self, name: &str, text: &str) -> GlobalValue<'ctx> {
        // NUL-terminated, as C strings are.
        let init = self.context.const_string(text.as_bytes(), true);
        let g = self.module.add_global(init.get_type(), None, name);
        g.set_initializer(&init);
        g.set_constant(true);
        g.set_linkage(Linkage::Private);
        g.set_unnamed_address(UnnamedAddress::Global);
        g.set_alignment(1);
        g
    }

    /// clang 16's `__tgt_offload_entry` (offload-formats' `TgtOffloadEntry`: `fields`,
    /// in order) as a weak constant in its section, as clang emits its own entries.
    pub fn add_offload_entry(
        &self,
        global_name: &str,
        fields: &[(FieldKind, EntryFieldValue<GlobalValue<'ctx>>)],
    ) -> GlobalValue<'ctx> {
        let ptr = self.ptr_type();
        let values: Vec<BasicValueEnum<'ctx>> = fields
            .iter()
            .map(|&(kind, value)| match (kind, value) {
                (_, EntryFieldValue::Pointer(g)) => g.as_pointer_value().const_cast(ptr).into(),
                (FieldKind::Pointer, EntryFieldValue::Int(n)) => self
                    .context
                    .i64_type()
                    .const_int(n, false)
                    .const_to_pointer(ptr)
                    .into(),
                (FieldKind::I64, EntryFieldValue::Int(n)) => {
                    self.context.i64_type().const_int(n, false).into()
                }
                (FieldKind::I32, EntryFieldValue::Int(n)) => {
                    self.context.i32_type().const_int(n, false).into()
                }
            })
            .collect();
        let init = self.context.const_struct(&values, false);
        let g = self.module.add_global(init.get_type(), None, global_name);
        g.set_initializer(&init);
        g.set_constant(true);
        g.set_linkage(Linkage::WeakAny);
        g.set_section(Some(SECTION_LEGACY));
        g.set_alignment(1);
        g
    }

    /// A weak, protected constant pointer global (in `address_space`) holding `target`
    /// (a function or a global variable of this module).
    pub fn add_pointer_global(
        &self,
        name: &str,
        target: GlobalValue<'ctx>,
        address_space: AddressSpace,
    ) -> GlobalValue<'ctx> {
        let ptr = self.ptr_type();
        let g = self.module.add_global(ptr, Some(address_space), name);
        g.set_initializer(&target.as_pointer_value().const_cast(ptr));
        g.set_constant(true);
        g.set_linkage(Linkage::WeakAny);
        g.set_visibility(GlobalVisibility::Protected);
        g.set_alignment(8);
        g
    }

    /// Append `values` to the appending array `llvm.used` or `llvm.compiler.used`.
    pub fn append_to_used(&self, list: &str, values: &[GlobalValue<'ctx>]) {
        if values.is_empty() {
            return;
        }
        let ptr = self.ptr_type();
        let mut all: Vec<Value<'ctx>> = Vec::new();
        if let Some(old) = self.global(list) {
            if let Some(init) = self.initializer(old) {
                all.extend((0..self.num_operands(init)).filter_map(|i| self.operand(init, i)));
            }
            self.delete_global(old);
        }
        all.extend(
            values
                .iter()
                .map(|v| Value::of(v.as_pointer_value().const_cast(ptr))),
        );
        let init = raw::constant_array(ptr.as_basic_type_enum(), &all);
        let g = self.module.add_global(init.get_type(), None, list);
        g.set_initializer(&init);
        g.set_linkage(Linkage::Appending);
        g.set_section(Some("llvm.metadata"));
    }

    /// Take `value` out of the appending array `llvm.used` or `llvm.compiler.used`.
    pub fn remove_from_used(&self, list: &str, value: GlobalValue<'ctx>) {
        let Some(global) = self.global(list) else {
            return;
        };
        let Some(init) = self.initializer(global) else {
            return;
        };
        let count = self.num_operands(init);
        let kept: Vec<Value<'ctx>> = (0..count)
            .filter_map(|i| self.operand(init, i))
            .filter(|&v| self.strip_casts(v) != Value::of(value))
            .collect();
        if kept.len() as u32 != count {
            self.replace_array_global(global, &kept);
        }
    }

    /// `ptr name(ptr)`: the module's function of that name, declared if missing.
    pub fn get_or_declare_ptr_to_ptr(
        &self,
        name: &str,
    ) -> (FunctionValue<'ctx>, FunctionType<'ctx>) {
        let ptr = self.ptr_type();
        let ty = ptr.fn_type(&[ptr.into()], false);
        let f = self
            .function(name)
            .unwrap_or_else(|| self.module.add_function(name, ty, None));
        (f, ty)
    }

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

    pub fn is_alloca(&self, v: Value<'ctx>) -> bool {
        v.instruction()
            .is_some_and(|inst| inst.get_opcode() == InstructionOpcode::Alloca)
    }

    /// True when `v`'s type is a pointer or an integer (what a vtable slot holds).
    pub fn is_pointer_or_integer(&self, v: Value<'ctx>) -> bool {
        matches!(
            v.basic(),
            Some(BasicValueEnum::PointerValue(_) | BasicValueEnum::IntValue(_))
        )
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

    /// The instructions and constants that use `v`.
    pub fn users(&self, v: Value<'ctx>) -> Vec<Value<'ctx>> {
        raw::users(v)
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

    /// The first argument of a call.
    pub fn first_argument(&self, call: InstructionValue<'ctx>) -> Option<Value<'ctx>> {
        self.operand(Value::of(call), 0)
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

    /// Mark a declared function as only reading memory, returning and not unwinding
    /// (`memory(read) nounwind willreturn`): the optimizer may then hoist and merge
    /// calls to it.
    pub fn mark_read_only(&self, function: FunctionValue<'ctx>) {
        // MemoryEffects: two bits per location (argument, inaccessible, other), 1 = read.
        const MEMORY_READ: u64 = 0b01_01_01;
        for (name, value) in [("memory", MEMORY_READ), ("nounwind", 0), ("willreturn", 0)] {
            let kind = Attribute::get_named_enum_kind_id(name);
            let attribute = self.context.create_enum_attribute(kind, value);
            function.add_attribute(AttributeLoc::Function, attribute);
        }
    }

    /// The value a call or invoke calls: its last operand.
    pub fn callee(&self, call: InstructionValue<'ctx>) -> Option<Value<'ctx>> {
        let last = call.get_num_operands().checked_sub(1)?;
        self.operand(Value::of(call), last)
    }

    /// True for a callee known before run time: a function, an alias, any constant.
    pub fn is_constant(&self, v: Value<'ctx>) -> bool {
        raw::is_a(v, raw::Class::Constant)
    }

    pub fn is_inline_asm(&self, v: Value<'ctx>) -> bool {
        raw::is_a(v, raw::Class::InlineAsm)
    }

    /// True when `v` is the result of a call to `function`.
    pub fn is_call_to(&self, v: Value<'ctx>, function: FunctionValue<'ctx>) -> bool {
        v.instruction()
            .filter(|inst| inst.get_opcode() == InstructionOpcode::Call)
            .and_then(|call| self.callee(call))
            == Some(Value::of(function))
    }

    /// The address space of a pointer-typed value (None if it is not a pointer).
    pub fn pointer_address_space(&self, v: Value<'ctx>) -> Option<AddressSpace> {
        match v.basic()? {
            BasicValueEnum::PointerValue(p) => Some(p.get_type().get_address_space()),
            _ => None,
        }
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
}

/// Building new code: what inline_lookup.rs writes.
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

/// What inkwell has no call for, on the raw C API. Each function says why inkwell's
/// own cannot serve.
mod raw {
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
}
