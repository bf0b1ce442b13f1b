//! [`Ir`]'s operations on the module's globals (variables and functions): looking them
//! up, reading their properties, editing and deleting them, and adding the new ones the
//! passes emit (offload entries, holders, `llvm.used` lists, the lookup declaration).
use super::{raw, Ir, Value};
use llvm_plugin::inkwell::attributes::{Attribute, AttributeLoc};
use llvm_plugin::inkwell::module::Linkage;
use llvm_plugin::inkwell::targets::TargetData;
use llvm_plugin::inkwell::types::{BasicType, FunctionType, PointerType};
use llvm_plugin::inkwell::values::{BasicValueEnum, FunctionValue, GlobalValue, UnnamedAddress};
use llvm_plugin::inkwell::{AddressSpace, GlobalVisibility};
use offload_formats::entries::{FieldKind, SECTION_LEGACY};

/// The value of one field of an offload entry.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum EntryFieldValue<V> {
    /// A global's address.
    Pointer(V),
    Int(u64),
}

impl<'ctx> Ir<'_, 'ctx> {
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

    pub fn initializer(&self, global: GlobalValue<'ctx>) -> Option<Value<'ctx>> {
        global.get_initializer().map(Value::of)
    }

    /// The section a global is placed in, if any.
    pub fn section(&self, global: GlobalValue<'ctx>) -> Option<String> {
        global
            .get_section()
            .map(|section| section.to_string_lossy().into_owned())
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
}
