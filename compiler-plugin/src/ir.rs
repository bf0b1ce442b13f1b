//! The few LLVM C API operations the passes need, behind safe functions.
//!
//! Every handle here comes from the module the pass manager gave the pass (or was just
//! created in it), and the pass holds `&mut Module` for the whole run, so each handle is
//! valid and unaliased by other threads for as long as these functions use it.
use llvm_plugin::inkwell::llvm_sys::core::*;
use llvm_plugin::inkwell::llvm_sys::debuginfo::{
    LLVMInstructionGetDebugLoc, LLVMInstructionSetDebugLoc,
};
use llvm_plugin::inkwell::llvm_sys::prelude::*;
use llvm_plugin::inkwell::llvm_sys::target::{LLVMABISizeOfType, LLVMGetModuleDataLayout};
use llvm_plugin::inkwell::llvm_sys::{
    LLVMAttributeFunctionIndex, LLVMLinkage, LLVMOpcode, LLVMTypeKind, LLVMVisibility,
};
use llvm_plugin::inkwell::module::Module;
use llvm_plugin::inkwell::values::{AsValueRef, FunctionValue};
use offload_formats::entries::{FieldKind, SECTION_LEGACY};
use std::ffi::{CStr, CString};

/// The value of one field of an offload entry.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum EntryFieldValue<V> {
    /// A global's address.
    Pointer(V),
    Int(u64),
}

/// An LLVM value of the module being transformed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Value(LLVMValueRef);

impl Value {
    /// The function a function pass runs on.
    pub fn of_function(function: &FunctionValue<'_>) -> Value {
        Value(function.as_value_ref())
    }
}

/// An LLVM type of the module's context (only this module hands them out).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Type(LLVMTypeRef);

/// The module a pass runs on.
pub struct Ir {
    module: LLVMModuleRef,
    ctx: LLVMContextRef,
}

fn cstring(s: &str) -> CString {
    CString::new(s).expect("LLVM names built by the pass contain no NUL")
}

impl Ir {
    pub fn new(module: &mut Module<'_>) -> Ir {
        let module = module.as_mut_ptr();
        // SAFETY: `module` is the live module the pass manager handed us.
        let ctx = unsafe { LLVMGetModuleContext(module) };
        Ir { module, ctx }
    }

    /// The module that holds `function` (a function pass's view of its module).
    pub fn of_function(function: &FunctionValue<'_>) -> Ir {
        // SAFETY: the pass manager hands the pass a live function of a live module.
        let module = unsafe { LLVMGetGlobalParent(function.as_value_ref()) };
        // SAFETY: `module` is that live module.
        let ctx = unsafe { LLVMGetModuleContext(module) };
        Ir { module, ctx }
    }

    /// The module's `source_filename`.
    pub fn source_file_name(&self) -> String {
        let mut len = 0usize;
        // SAFETY: valid module; LLVM returns a pointer to `len` bytes it owns.
        let ptr = unsafe { LLVMGetSourceFileName(self.module, &mut len) };
        if ptr.is_null() {
            return String::new();
        }
        // SAFETY: `ptr` points to `len` initialised bytes owned by the module.
        let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) };
        String::from_utf8_lossy(bytes).into_owned()
    }

    /// True when the module has module flag `key` (clang marks device modules with
    /// `openmp-device`).
    pub fn has_module_flag(&self, key: &str) -> bool {
        // SAFETY: valid module; the key pointer and length describe `key`.
        !unsafe { LLVMGetModuleFlag(self.module, key.as_ptr().cast(), key.len()) }.is_null()
    }

    /// The module's target triple.
    pub fn triple(&self) -> String {
        // SAFETY: valid module; the triple is a NUL-terminated string it owns.
        unsafe { CStr::from_ptr(LLVMGetTarget(self.module)) }
            .to_string_lossy()
            .into_owned()
    }

    /// The address space data-layout component `G<n>` puts globals in (0 if absent).
    pub fn globals_address_space(&self) -> u32 {
        // SAFETY: valid module; the layout string is NUL-terminated and module-owned.
        let layout = unsafe { CStr::from_ptr(LLVMGetDataLayoutStr(self.module)) };
        layout
            .to_string_lossy()
            .split('-')
            .find_map(|part| part.strip_prefix('G')?.parse().ok())
            .unwrap_or(0)
    }

    pub fn global(&self, name: &str) -> Option<Value> {
        let name = cstring(name);
        // SAFETY: valid module, NUL-terminated name.
        let g = unsafe { LLVMGetNamedGlobal(self.module, name.as_ptr()) };
        (!g.is_null()).then_some(Value(g))
    }

    pub fn function(&self, name: &str) -> Option<Value> {
        let name = cstring(name);
        // SAFETY: valid module, NUL-terminated name.
        let f = unsafe { LLVMGetNamedFunction(self.module, name.as_ptr()) };
        (!f.is_null()).then_some(Value(f))
    }

    pub fn functions(&self) -> Vec<Value> {
        let mut out = Vec::new();
        // SAFETY: valid module; iteration only reads the function list, which the
        // caller does not change while this runs.
        let mut f = unsafe { LLVMGetFirstFunction(self.module) };
        while !f.is_null() {
            out.push(Value(f));
            // SAFETY: `f` is a function of this module.
            f = unsafe { LLVMGetNextFunction(f) };
        }
        out
    }

    pub fn globals(&self) -> Vec<Value> {
        let mut out = Vec::new();
        // SAFETY: valid module; iteration only reads the global list, which the caller
        // changes only after the walk.
        let mut g = unsafe { LLVMGetFirstGlobal(self.module) };
        while !g.is_null() {
            out.push(Value(g));
            // SAFETY: `g` is a global of this module.
            g = unsafe { LLVMGetNextGlobal(g) };
        }
        out
    }

    /// True for a global this module defines for the link (not a declaration, nor an
    /// `available_externally` copy of one defined elsewhere).
    pub fn defines_for_link(&self, global: Value) -> bool {
        // SAFETY: `global` is a global value of this module.
        let linkage = unsafe { LLVMGetLinkage(global.0) };
        !self.is_declaration(global) && linkage != LLVMLinkage::LLVMAvailableExternallyLinkage
    }

    /// The bytes a global variable's value occupies (its type's ABI size).
    pub fn global_size(&self, global: Value) -> u64 {
        // SAFETY: `global` is a global variable of this module; the data layout is the
        // module's own and outlives the call.
        unsafe {
            let layout = LLVMGetModuleDataLayout(self.module);
            LLVMABISizeOfType(layout, LLVMGlobalGetValueType(global.0))
        }
    }

    /// Operand `i` of a constant aggregate or instruction.
    pub fn operand(&self, v: Value, i: u32) -> Value {
        // SAFETY: callers pass an index below `num_operands(v)`.
        Value(unsafe { LLVMGetOperand(v.0, i) })
    }

    pub fn num_operands(&self, v: Value) -> u32 {
        // SAFETY: `v` is a live user value.
        unsafe { LLVMGetNumOperands(v.0) as u32 }
    }

    pub fn initializer(&self, global: Value) -> Option<Value> {
        // SAFETY: `global` is a global variable of this module.
        let init = unsafe { LLVMGetInitializer(global.0) };
        (!init.is_null()).then_some(Value(init))
    }

    /// `v` with pointer casts (constant expressions included) looked through.
    pub fn strip_casts(&self, mut v: Value) -> Value {
        loop {
            // SAFETY: `v` is a live value; the checks only inspect it.
            let expr = unsafe { LLVMIsAConstantExpr(v.0) };
            if expr.is_null() {
                return v;
            }
            // SAFETY: `expr` is a constant expression.
            let op = unsafe { LLVMGetConstOpcode(expr) };
            match op {
                LLVMOpcode::LLVMBitCast | LLVMOpcode::LLVMAddrSpaceCast => {
                    v = self.operand(v, 0);
                }
                _ => return v,
            }
        }
    }

    /// The function `v` is, if it is one.
    pub fn as_function(&self, v: Value) -> Option<Value> {
        // SAFETY: `v` is a live value; the check only inspects it.
        let f = unsafe { LLVMIsAFunction(v.0) };
        (!f.is_null()).then_some(Value(f))
    }

    /// The string a `[N x i8]` constant global holds (an annotation's text).
    pub fn c_string_of_global(&self, v: Value) -> Option<String> {
        let v = self.strip_casts(v);
        // SAFETY: `v` is a live value; the check only inspects it.
        let g = unsafe { LLVMIsAGlobalVariable(v.0) };
        if g.is_null() {
            return None;
        }
        let init = self.initializer(Value(g))?;
        // SAFETY: `init` is a live constant; the check only inspects it.
        let data = unsafe { LLVMIsAConstantDataSequential(init.0) };
        // SAFETY: as above.
        if data.is_null() || unsafe { LLVMIsConstantString(data) } == 0 {
            return None;
        }
        let mut len = 0usize;
        // SAFETY: `data` is a constant string; LLVM returns `len` bytes it owns.
        let ptr = unsafe { LLVMGetAsString(data, &mut len) };
        // SAFETY: `ptr` points to `len` initialised bytes owned by the constant.
        let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) };
        let text = bytes.split(|&b| b == 0).next().unwrap_or_default();
        Some(String::from_utf8_lossy(text).into_owned())
    }

    pub fn name(&self, v: Value) -> String {
        let mut len = 0usize;
        // SAFETY: `v` is a live value; LLVM returns `len` bytes of its name.
        let ptr = unsafe { LLVMGetValueName2(v.0, &mut len) };
        if ptr.is_null() {
            return String::new();
        }
        // SAFETY: `ptr` points to `len` initialised bytes owned by the value.
        let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) };
        String::from_utf8_lossy(bytes).into_owned()
    }

    pub fn is_declaration(&self, global: Value) -> bool {
        // SAFETY: `global` is a global value of this module.
        unsafe { LLVMIsDeclaration(global.0) != 0 }
    }

    pub fn has_local_linkage(&self, global: Value) -> bool {
        // SAFETY: `global` is a global value of this module.
        let linkage = unsafe { LLVMGetLinkage(global.0) };
        matches!(
            linkage,
            LLVMLinkage::LLVMInternalLinkage | LLVMLinkage::LLVMPrivateLinkage
        )
    }

    /// Delete a global variable that nothing uses any more.
    pub fn delete_global(&self, global: Value) {
        // SAFETY: `global` is a global variable of this module; callers delete it only
        // once and drop every handle to it.
        unsafe { LLVMDeleteGlobal(global.0) }
    }

    /// Delete a global variable whose remaining users are dead constants (the entries
    /// of an annotation array just replaced): they are pointed at null first, so no
    /// constant is left referring to the deleted global.
    pub fn delete_global_with_dead_users(&self, global: Value) {
        // SAFETY: `global` is a global variable of this module; RAUW with a null pointer
        // of its own type rewrites every constant that still refers to it.
        unsafe {
            LLVMReplaceAllUsesWith(global.0, LLVMConstNull(LLVMTypeOf(global.0)));
            LLVMDeleteGlobal(global.0);
        }
    }

    /// Replace `global`'s initializer with an array of `elements` of `element_type`
    /// (an appending array such as `llvm.global.annotations`), or delete `global` when
    /// `elements` is empty.
    pub fn replace_array_global(&self, global: Value, element_type: Type, elements: &[Value]) {
        if elements.is_empty() {
            self.delete_global(global);
            return;
        }
        let name = self.name(global);
        let mut vals: Vec<LLVMValueRef> = elements.iter().map(|v| v.0).collect();
        // SAFETY: `vals` are constants of `element_type` taken from the old array;
        // LLVMSetValueName2 renames the old global so the new one takes its name; the
        // old one has no users besides being a named root, so deleting it is sound.
        unsafe {
            let init = LLVMConstArray(element_type.0, vals.as_mut_ptr(), vals.len() as u32);
            let old_name = cstring(&format!("{name}.old"));
            LLVMSetValueName2(global.0, old_name.as_ptr(), old_name.as_bytes().len());
            let new_name = cstring(&name);
            let g = LLVMAddGlobal(self.module, LLVMTypeOf(init), new_name.as_ptr());
            LLVMSetInitializer(g, init);
            LLVMSetLinkage(g, LLVMGetLinkage(global.0));
            let section = LLVMGetSection(global.0);
            if !section.is_null() {
                LLVMSetSection(g, section);
            }
            LLVMDeleteGlobal(global.0);
        }
    }

    /// The element type of an array constant.
    pub fn array_element_type(&self, array: Value) -> Type {
        // SAFETY: `array` is a constant of array type.
        Type(unsafe { LLVMGetElementType(LLVMTypeOf(array.0)) })
    }

    fn ptr_type(&self, address_space: u32) -> LLVMTypeRef {
        // SAFETY: valid context.
        unsafe { LLVMPointerTypeInContext(self.ctx, address_space) }
    }

    /// A private, unnamed_addr constant C string.
    pub fn add_c_string(&self, name: &str, text: &str) -> Value {
        let name = cstring(name);
        // SAFETY: valid context/module; the string constant is copied by LLVM.
        unsafe {
            let init = LLVMConstStringInContext(
                self.ctx,
                text.as_ptr().cast(),
                text.len() as u32,
                0, // NUL-terminated
            );
            let g = LLVMAddGlobal(self.module, LLVMTypeOf(init), name.as_ptr());
            LLVMSetInitializer(g, init);
            LLVMSetGlobalConstant(g, 1);
            LLVMSetLinkage(g, LLVMLinkage::LLVMPrivateLinkage);
            LLVMSetUnnamedAddress(
                g,
                llvm_plugin::inkwell::llvm_sys::LLVMUnnamedAddr::LLVMGlobalUnnamedAddr,
            );
            LLVMSetAlignment(g, 1);
            Value(g)
        }
    }

    /// clang 16's `__tgt_offload_entry` (offload-formats' `TgtOffloadEntry`: `fields`,
    /// in order) as a weak constant in its section, as clang emits its own entries.
    pub fn add_offload_entry(
        &self,
        global_name: &str,
        fields: &[(FieldKind, EntryFieldValue<Value>)],
    ) -> Value {
        let global_name = cstring(global_name);
        // SAFETY: valid context/module; every operand is a constant of this module.
        unsafe {
            let ptr = self.ptr_type(0);
            let mut values: Vec<LLVMValueRef> = fields
                .iter()
                .map(|&(kind, value)| {
                    let ty = match kind {
                        FieldKind::Pointer => ptr,
                        FieldKind::I64 => LLVMInt64TypeInContext(self.ctx),
                        FieldKind::I32 => LLVMInt32TypeInContext(self.ctx),
                    };
                    match value {
                        EntryFieldValue::Pointer(v) => LLVMConstPointerCast(v.0, ty),
                        EntryFieldValue::Int(n) if kind == FieldKind::Pointer => LLVMConstIntToPtr(
                            LLVMConstInt(LLVMInt64TypeInContext(self.ctx), n, 0),
                            ty,
                        ),
                        EntryFieldValue::Int(n) => LLVMConstInt(ty, n, 0),
                    }
                })
                .collect();
            let init =
                LLVMConstStructInContext(self.ctx, values.as_mut_ptr(), values.len() as u32, 0);
            let g = LLVMAddGlobal(self.module, LLVMTypeOf(init), global_name.as_ptr());
            LLVMSetInitializer(g, init);
            LLVMSetGlobalConstant(g, 1);
            LLVMSetLinkage(g, LLVMLinkage::LLVMWeakAnyLinkage);
            let section = cstring(SECTION_LEGACY);
            LLVMSetSection(g, section.as_ptr());
            LLVMSetAlignment(g, 1);
            Value(g)
        }
    }

    /// A weak, protected constant pointer global (in `address_space`) holding `target`
    /// (a function or a global variable of this module).
    pub fn add_pointer_global(&self, name: &str, target: Value, address_space: u32) -> Value {
        let name = cstring(name);
        // SAFETY: valid context/module; `target` is a global value of this module.
        unsafe {
            let ptr = self.ptr_type(0);
            let g = LLVMAddGlobalInAddressSpace(self.module, ptr, name.as_ptr(), address_space);
            LLVMSetInitializer(g, LLVMConstPointerCast(target.0, ptr));
            LLVMSetGlobalConstant(g, 1);
            LLVMSetLinkage(g, LLVMLinkage::LLVMWeakAnyLinkage);
            LLVMSetVisibility(g, LLVMVisibility::LLVMProtectedVisibility);
            LLVMSetAlignment(g, 8);
            Value(g)
        }
    }

    /// Append `values` to the appending array `llvm.used` or `llvm.compiler.used`.
    pub fn append_to_used(&self, list: &str, values: &[Value]) {
        if values.is_empty() {
            return;
        }
        let ptr = self.ptr_type(0);
        let mut all: Vec<LLVMValueRef> = Vec::new();
        if let Some(old) = self.global(list) {
            if let Some(init) = self.initializer(old) {
                for i in 0..self.num_operands(init) {
                    all.push(self.operand(init, i).0);
                }
            }
            self.delete_global(old);
        }
        // SAFETY: every element is a constant of this module cast to `ptr`.
        unsafe {
            all.extend(values.iter().map(|v| LLVMConstPointerCast(v.0, ptr)));
            let init = LLVMConstArray(ptr, all.as_mut_ptr(), all.len() as u32);
            let name = cstring(list);
            let g = LLVMAddGlobal(self.module, LLVMTypeOf(init), name.as_ptr());
            LLVMSetInitializer(g, init);
            LLVMSetLinkage(g, LLVMLinkage::LLVMAppendingLinkage);
            let section = cstring("llvm.metadata");
            LLVMSetSection(g, section.as_ptr());
        }
    }

    /// Take `value` out of the appending array `llvm.used` or `llvm.compiler.used`.
    pub fn remove_from_used(&self, list: &str, value: Value) {
        let Some(global) = self.global(list) else {
            return;
        };
        let Some(init) = self.initializer(global) else {
            return;
        };
        let kept: Vec<Value> = (0..self.num_operands(init))
            .map(|i| self.operand(init, i))
            .filter(|&v| self.strip_casts(v) != value)
            .collect();
        if kept.len() as u32 != self.num_operands(init) {
            let element_type = self.array_element_type(init);
            self.replace_array_global(global, element_type, &kept);
        }
    }

    /// `ptr name(ptr)`: the module's function of that name, declared if missing.
    pub fn get_or_declare_ptr_to_ptr(&self, name: &str) -> (Value, Type) {
        let ptr = self.ptr_type(0);
        let mut params = [ptr];
        // SAFETY: valid context; `params` outlives the call.
        let ty = unsafe { LLVMFunctionType(ptr, params.as_mut_ptr(), 1, 0) };
        if let Some(f) = self.function(name) {
            return (f, Type(ty));
        }
        let cname = cstring(name);
        // SAFETY: valid module and type; the name is NUL-terminated.
        let f = unsafe { LLVMAddFunction(self.module, cname.as_ptr(), ty) };
        (Value(f), Type(ty))
    }

    /// Every instruction of `function` with one of `opcodes`, in order.
    fn instructions(&self, function: Value, opcodes: &[LLVMOpcode]) -> Vec<Value> {
        let mut out = Vec::new();
        // SAFETY: `function` is a function of this module; the walk reads its blocks
        // and instructions, which the caller changes only after the walk.
        unsafe {
            let mut bb = LLVMGetFirstBasicBlock(function.0);
            while !bb.is_null() {
                let mut inst = LLVMGetFirstInstruction(bb);
                while !inst.is_null() {
                    if opcodes.contains(&LLVMGetInstructionOpcode(inst)) {
                        out.push(Value(inst));
                    }
                    inst = LLVMGetNextInstruction(inst);
                }
                bb = LLVMGetNextBasicBlock(bb);
            }
        }
        out
    }

    /// Every call and invoke instruction of `function`.
    pub fn call_sites(&self, function: Value) -> Vec<Value> {
        self.instructions(function, &[LLVMOpcode::LLVMCall, LLVMOpcode::LLVMInvoke])
    }

    /// Every load instruction of `function`.
    pub fn loads(&self, function: Value) -> Vec<Value> {
        self.instructions(function, &[LLVMOpcode::LLVMLoad])
    }

    /// The instruction `v` is a load, if it is one.
    pub fn as_load(&self, v: Value) -> Option<Value> {
        // SAFETY: `v` is a live value; the check only inspects it.
        let load = unsafe { LLVMIsALoadInst(v.0) };
        (!load.is_null()).then_some(Value(load))
    }

    /// The address a load reads.
    pub fn load_address(&self, load: Value) -> Value {
        self.operand(load, 0)
    }

    pub fn is_alloca(&self, v: Value) -> bool {
        // SAFETY: `v` is a live value; the check only inspects it.
        unsafe { !LLVMIsAAllocaInst(v.0).is_null() }
    }

    /// True when `v`'s type is a pointer or an integer (what a vtable slot holds).
    pub fn is_pointer_or_integer(&self, v: Value) -> bool {
        // SAFETY: `v` is a live value; its type is owned by the context.
        let kind = unsafe { LLVMGetTypeKind(LLVMTypeOf(v.0)) };
        matches!(
            kind,
            LLVMTypeKind::LLVMPointerTypeKind | LLVMTypeKind::LLVMIntegerTypeKind
        )
    }

    /// The base pointer of a `getelementptr` instruction whose indices are all
    /// constants (a fixed offset), if `v` is one.
    pub fn constant_offset_base(&self, v: Value) -> Option<Value> {
        // SAFETY: `v` is a live value; the check only inspects it.
        let gep = unsafe { LLVMIsAGetElementPtrInst(v.0) };
        if gep.is_null() {
            return None;
        }
        let n = self.num_operands(v);
        (1..n)
            .all(|i| self.is_constant(self.operand(v, i)))
            .then(|| self.operand(v, 0))
    }

    /// The instructions and constants that use `v`.
    pub fn users(&self, v: Value) -> Vec<Value> {
        let mut out = Vec::new();
        // SAFETY: `v` is a live value; the walk reads its use list, which the caller
        // changes only after the walk.
        unsafe {
            let mut u = LLVMGetFirstUse(v.0);
            while !u.is_null() {
                out.push(Value(LLVMGetUser(u)));
                u = LLVMGetNextUse(u);
            }
        }
        out
    }

    fn metadata_kind(&self, name: &str) -> u32 {
        // SAFETY: valid context; the name pointer and length describe `name`.
        unsafe { LLVMGetMDKindIDInContext(self.ctx, name.as_ptr().cast(), name.len() as u32) }
    }

    /// The operands of a metadata node (as values), empty for anything else.
    fn md_operands(&self, node: LLVMValueRef) -> Vec<LLVMValueRef> {
        // SAFETY: `node` is a live value; it is read only when it is an MDNode.
        unsafe {
            if node.is_null() || LLVMIsAMDNode(node).is_null() {
                return Vec::new();
            }
            let mut ops = vec![std::ptr::null_mut(); LLVMGetMDNodeNumOperands(node) as usize];
            LLVMGetMDNodeOperands(node, ops.as_mut_ptr());
            ops
        }
    }

    /// The name of the type the instruction's TBAA access tag `!{base, access, offset}`
    /// accesses (clang tags vptr loads with "vtable pointer"); None without a tag.
    pub fn tbaa_access_type(&self, inst: Value) -> Option<String> {
        // SAFETY: `inst` is an instruction of this module.
        let tag = unsafe { LLVMGetMetadata(inst.0, self.metadata_kind("tbaa")) };
        let access = *self.md_operands(tag).get(1)?;
        let name = *self.md_operands(access).first()?;
        let mut len = 0u32;
        // SAFETY: `name` is a metadata operand; LLVMGetMDString returns null unless it is
        // an MDString, else `len` bytes the context owns.
        let ptr = unsafe { LLVMGetMDString(name, &mut len) };
        if ptr.is_null() {
            return None;
        }
        // SAFETY: as above.
        let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len as usize) };
        Some(String::from_utf8_lossy(bytes).into_owned())
    }

    /// Insert `%t = call ptr lookup(ptr value)` right after the instruction `value` and
    /// make every other use of `value` use `%t`. Returns `%t`.
    pub fn translate_after(&self, value: Value, lookup: Value, lookup_type: Type) -> Value {
        // SAFETY: `value` is a non-terminator instruction (callers pass loads), so an
        // instruction follows it.
        let next = Value(unsafe { LLVMGetNextInstruction(value.0) });
        let translated = self.lookup_call_before(next, value, value, lookup, lookup_type);
        // SAFETY: `translated` is the call just built; after the RAUW its own argument
        // is set back to `value`.
        unsafe {
            LLVMReplaceAllUsesWith(value.0, translated.0);
            LLVMSetOperand(translated.0, 0, value.0);
        }
        translated
    }

    /// `%t = call ptr lookup(ptr argument)` inserted before `before`, with the debug
    /// location of `located_as` (required for inlinable calls in functions with debug
    /// info).
    fn lookup_call_before(
        &self,
        before: Value,
        argument: Value,
        located_as: Value,
        lookup: Value,
        lookup_type: Type,
    ) -> Value {
        // SAFETY: `before` and `located_as` are instructions of this module, `argument`
        // a pointer in address space 0 (checked by the callers) and `lookup` of
        // `lookup_type`; the builder is disposed before returning.
        unsafe {
            let builder = LLVMCreateBuilderInContext(self.ctx);
            LLVMPositionBuilderBefore(builder, before.0);
            let mut args = [argument.0];
            let name = cstring("translated");
            let translated = LLVMBuildCall2(
                builder,
                lookup_type.0,
                lookup.0,
                args.as_mut_ptr(),
                1,
                name.as_ptr(),
            );
            let loc = LLVMInstructionGetDebugLoc(located_as.0);
            if !loc.is_null() {
                LLVMInstructionSetDebugLoc(translated, loc);
            }
            LLVMDisposeBuilder(builder);
            Value(translated)
        }
    }

    /// The first argument of a call.
    pub fn first_argument(&self, call: Value) -> Value {
        self.operand(call, 0)
    }

    /// Replace every use of `inst` with `with` and delete `inst`.
    pub fn replace_and_erase(&self, inst: Value, with: Value) {
        // SAFETY: `inst` is an instruction of this module and `with` a value of its
        // type; nothing refers to `inst` after the RAUW, so erasing it is sound.
        unsafe {
            LLVMReplaceAllUsesWith(inst.0, with.0);
            LLVMInstructionEraseFromParent(inst.0);
        }
    }

    /// `v` with GEPs and pointer casts (constant or instruction) looked
    /// through: the object an address points into.
    pub fn underlying_object(&self, mut v: Value) -> Value {
        loop {
            v = self.strip_casts(v);
            // SAFETY: `v` is a live value; the checks only inspect it.
            let steps_through = unsafe {
                !LLVMIsAGetElementPtrInst(v.0).is_null()
                    || !LLVMIsABitCastInst(v.0).is_null()
                    || !LLVMIsAAddrSpaceCastInst(v.0).is_null()
                    || (!LLVMIsAConstantExpr(v.0).is_null()
                        && LLVMGetConstOpcode(v.0) == LLVMOpcode::LLVMGetElementPtr)
            };
            let next = steps_through.then(|| self.operand(v, 0));
            match next {
                Some(n) => v = n,
                None => return v,
            }
        }
    }

    /// True for a global value (function, variable, alias) or a null pointer.
    pub fn is_global_or_null(&self, v: Value) -> bool {
        // SAFETY: `v` is a live value; the checks only inspect it.
        unsafe { !LLVMIsAGlobalValue(v.0).is_null() || !LLVMIsAConstantPointerNull(v.0).is_null() }
    }

    /// Mark a declared function as only reading memory, returning and not unwinding
    /// (`memory(read) nounwind willreturn`): the optimizer may then hoist and merge
    /// calls to it.
    pub fn mark_read_only(&self, function: Value) {
        // MemoryEffects: two bits per location (argument, inaccessible, other), 1 = read.
        const MEMORY_READ: u64 = 0b01_01_01;
        for (name, value) in [("memory", MEMORY_READ), ("nounwind", 0), ("willreturn", 0)] {
            // SAFETY: valid context and function; the kind is looked up by name.
            unsafe {
                let kind = LLVMGetEnumAttributeKindForName(name.as_ptr().cast(), name.len());
                let attr = LLVMCreateEnumAttribute(self.ctx, kind, value);
                LLVMAddAttributeAtIndex(function.0, LLVMAttributeFunctionIndex, attr);
            }
        }
    }

    /// The value a call or invoke calls.
    pub fn callee(&self, call: Value) -> Value {
        // SAFETY: `call` is a call or invoke instruction.
        Value(unsafe { LLVMGetCalledValue(call.0) })
    }

    /// True for a callee known before run time: a function, an alias, any constant.
    pub fn is_constant(&self, v: Value) -> bool {
        // SAFETY: `v` is a live value; the check only inspects it.
        unsafe { !LLVMIsAConstant(v.0).is_null() }
    }

    pub fn is_inline_asm(&self, v: Value) -> bool {
        // SAFETY: `v` is a live value; the check only inspects it.
        unsafe { !LLVMIsAInlineAsm(v.0).is_null() }
    }

    /// True when `v` is the result of a call to `function`.
    pub fn is_call_to(&self, v: Value, function: Value) -> bool {
        // SAFETY: `v` is a live value; the checks only inspect it.
        unsafe {
            let call = LLVMIsACallInst(v.0);
            !call.is_null() && LLVMGetCalledValue(call) == function.0
        }
    }

    /// The address space of a pointer-typed value (None if it is not a pointer).
    pub fn pointer_address_space(&self, v: Value) -> Option<u32> {
        // SAFETY: `v` is a live value; its type is owned by the context.
        unsafe {
            let ty = LLVMTypeOf(v.0);
            (LLVMGetTypeKind(ty) == LLVMTypeKind::LLVMPointerTypeKind)
                .then(|| LLVMGetPointerAddressSpace(ty))
        }
    }

    /// Insert `%t = call ptr lookup(ptr callee)` before `call` and make `call` call `%t`.
    pub fn translate_callee(&self, call: Value, lookup: Value, lookup_type: Type) {
        let callee = self.callee(call);
        let translated = self.lookup_call_before(call, callee, call, lookup, lookup_type);
        // SAFETY: `call` is a call or invoke; the callee is the last operand of both.
        unsafe {
            let last = LLVMGetNumOperands(call.0) as u32 - 1;
            LLVMSetOperand(call.0, last, translated.0);
        }
    }
}
