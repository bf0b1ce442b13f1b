// The AST half of the compiler plugin: clang's plugin API is C++ only, so this file is
// the glue and nothing more. It finds every function that `declare target ... indirect`
// marks (with a true `indirect(expr)`), in every form clang 16 parses, and hands it to
// code generation as `__attribute__((annotate("omp_declare_target_indirect")))`, which
// clang carries into IR (`llvm.global.annotations`) for the definition it emits, host
// and device, C and C++ alike. The IR pass (src/, Rust) reads that annotation.
//
// Why an annotation: it travels inside the module, so it works at -O0 and -O2, through
// -emit-llvm/-save-temps round trips, and in every cc1 job of an offload compile,
// without any state shared between the AST and the pass.
//
// It compiles against clang 16, 17 and 18 (build.rs picks the headers); where their
// APIs differ, the small helpers below say which version spells it how.
#include "clang/AST/ASTConsumer.h"
#include "clang/AST/ASTContext.h"
#include "clang/AST/ASTMutationListener.h"
#include "clang/AST/Attr.h"
#include "clang/AST/Mangle.h"
#include "clang/AST/VTableBuilder.h"
#include "clang/AST/RecursiveASTVisitor.h"
#include "clang/Basic/Diagnostic.h"
#include "clang/Basic/OpenMPKinds.h"
#include "clang/Basic/TargetInfo.h"
#include "clang/Basic/Version.h"
#include "clang/Frontend/CompilerInstance.h"
#include "clang/Frontend/FrontendPluginRegistry.h"
#include "clang/Sema/Sema.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <cstdio>
#include <memory>
#include <unistd.h>
#include <string>
#include <vector>

using namespace clang;

namespace {

// The device compile of an offload compilation (`-fopenmp-is-target-device`): clang 17
// renamed the language option from OpenMPIsDevice to OpenMPIsTargetDevice.
bool isDeviceCompile(const ASTContext &Ctx) {
#if CLANG_VERSION_MAJOR >= 17
  return Ctx.getLangOpts().OpenMPIsTargetDevice;
#else
  return Ctx.getLangOpts().OpenMPIsDevice;
#endif
}

// A pure virtual function: clang 18 renamed FunctionDecl::isPure to isPureVirtual.
bool isPureVirtual(const CXXMethodDecl *MD) {
#if CLANG_VERSION_MAJOR >= 18
  return MD->isPureVirtual();
#else
  return MD->isPure();
#endif
}

// Must match the annotations the IR pass looks for (src/annotations.rs).
constexpr const char *IndirectAnnotation = "omp_declare_target_indirect";
// Followed by a vtable's symbol: the vtable group of a device class, to register.
constexpr const char *VtableAnnotationPrefix = "omp_declare_target_vtable:";
// The variable that carries those annotations into IR (the pass deletes it).
constexpr const char *VtableCarrierName = "__omp_indirect_vtables";

// True when one of the function's declare-target attributes has the `indirect` clause
// with a true (or absent) argument: `indirect(0)` is not indirect. clang 16 records a
// bare `indirect` as Indirect=true without an expression, and `indirect(expr)` as
// Indirect=false with the expression, so both are looked at.
bool isIndirect(const FunctionDecl *FD, const ASTContext &Ctx) {
  for (const auto *A : FD->specific_attrs<OMPDeclareTargetDeclAttr>()) {
    const Expr *E = A->getIndirectExpr();
    if (!E) {
      if (A->getIndirect())
        return true;
      continue;
    }
    if (E->isValueDependent())
      continue;
    Expr::EvalResult Value;
    if (E->EvaluateAsInt(Value, Ctx) && Value.Val.getInt().getBoolValue())
      return true;
  }
  return false;
}

bool isAnnotated(const FunctionDecl *FD) {
  for (const auto *A : FD->specific_attrs<AnnotateAttr>())
    if (A->getAnnotation() == IndirectAnnotation)
      return true;
  return false;
}

// True when device code may call the function: one of its declarations (or, for a
// member of a class template instantiation, its pattern's) is `declare target` for the
// device (any device_type but host).
bool isDeviceFunction(const FunctionDecl *FD) {
  for (const FunctionDecl *D : FD->redecls())
    for (const auto *A : D->specific_attrs<OMPDeclareTargetDeclAttr>())
      if (A->getDevType() != OMPDeclareTargetDeclAttr::DT_Host)
        return true;
  if (const FunctionDecl *Pattern = FD->getTemplateInstantiationPattern())
    if (Pattern != FD)
      return isDeviceFunction(Pattern);
  return false;
}

// A complete, non-dependent, valid dynamic class: one with a vtable group of its own.
bool hasVTableGroup(const CXXRecordDecl *RD) {
  return RD->isCompleteDefinition() && !RD->isDependentContext() && !RD->isInvalidDecl() &&
         RD->isDynamicClass();
}

// The functions the slots of the class's vtable group call (thunks as the functions
// they reach), pure and deleted virtuals left out: the C++ runtime's stubs stand in for
// those.
llvm::SmallVector<const CXXMethodDecl *, 16> slotFunctions(const CXXRecordDecl *RD,
                                                           ItaniumVTableContext &VTables) {
  llvm::SmallVector<const CXXMethodDecl *, 16> Functions;
  for (const VTableComponent &Slot : VTables.getVTableLayout(RD).vtable_components()) {
    if (!Slot.isUsedFunctionPointerKind())
      continue;
    const CXXMethodDecl *MD = Slot.getFunctionDecl();
    if (!isPureVirtual(MD) && !MD->isDeleted())
      Functions.push_back(MD);
  }
  return Functions;
}

// A device class: a dynamic class whose vtable group holds, in every function slot, a
// function device code may call (a pure or deleted virtual, or one the compiler defines
// implicitly, also counts), at least one of them `declare target`. Its objects can be
// used on the device, so its vtables are emitted there and registered.
bool isDeviceClass(const CXXRecordDecl *RD, ASTContext &Ctx) {
  if (!hasVTableGroup(RD))
    return false;
  auto *VTables = dyn_cast<ItaniumVTableContext>(Ctx.getVTableContext());
  if (!VTables)
    return false;
  bool AnyDevice = false;
  for (const CXXMethodDecl *MD : slotFunctions(RD, *VTables)) {
    if (isDeviceFunction(MD)) {
      AnyDevice = true;
      continue;
    }
    if (!MD->isImplicit())
      return false;
  }
  return AnyDevice;
}

// Visits `Found` over device code: every function device code may call (isDeviceFunction)
// and every target region's statement.
template <typename Visitor> void traverseDeviceCode(ASTContext &Ctx, Visitor &Found) {
  struct DeviceCode : RecursiveASTVisitor<DeviceCode> {
    explicit DeviceCode(Visitor &V) : V(V) {}
    bool shouldVisitTemplateInstantiations() const { return true; }
    bool VisitFunctionDecl(FunctionDecl *FD) {
      if (FD->doesThisDeclarationHaveABody() && isDeviceFunction(FD))
        V.TraverseStmt(FD->getBody());
      return true;
    }
    bool VisitOMPExecutableDirective(OMPExecutableDirective *D) {
      if (isOpenMPTargetExecutionDirective(D->getDirectiveKind()) && D->hasAssociatedStmt())
        V.TraverseStmt(D->getAssociatedStmt());
      return true;
    }
    Visitor &V;
  } Device(Found);
  Device.TraverseDecl(Ctx.getTranslationUnitDecl());
}

// True when this unit defines the class's vtable group under the C++ ABI: no key
// function (every unit that needs it, as a linkonce_odr comdat) or the key function
// defined here, and not an explicit instantiation declared elsewhere.
bool emitsVTableHere(const CXXRecordDecl *RD, ASTContext &Ctx) {
  if (RD->getTemplateSpecializationKind() == TSK_ExplicitInstantiationDeclaration)
    return false;
  const CXXMethodDecl *Key = Ctx.getCurrentKeyFunction(RD);
  return !Key || Key->hasBody();
}

// True when the expression needs the C++ runtime's __dynamic_cast: a downcast or
// cross-cast (not an upcast, which Sema resolves statically, nor a cast to void*, which
// reads the offset-to-top from the translated vtable).
bool needsRuntimeDynamicCast(const CXXDynamicCastExpr *E) {
  if (E->getCastKind() != CK_Dynamic || E->isAlwaysNull())
    return false;
  QualType To = E->getTypeAsWritten();
  if (const auto *P = To->getAs<PointerType>())
    return !P->getPointeeType()->isVoidType();
  return true;
}

// Annotate every declaration of the function: codegen reads the attribute from the
// declaration it emits, which may be one seen before or after this point. `used` makes
// codegen emit it even where nothing calls it (a `static` indirect function in the
// device compile): its entry refers to it.
void annotate(FunctionDecl *FD, ASTContext &Ctx) {
  for (FunctionDecl *D : FD->redecls()) {
    if (isAnnotated(D))
      continue;
    D->addAttr(AnnotateAttr::CreateImplicit(Ctx, IndirectAnnotation, nullptr, 0,
                                            D->getSourceRange()));
    if (!D->hasAttr<UsedAttr>())
      D->addAttr(UsedAttr::CreateImplicit(Ctx, D->getSourceRange()));
  }
}

class IndirectConsumer : public ASTConsumer, public ASTMutationListener {
public:
  explicit IndirectConsumer(CompilerInstance &CI) : CI(CI) {}

  // Forms that mark the function as it is declared (`declare target indirect ... end`,
  // `begin declare target indirect`, `to(f) indirect` before the definition): seen here,
  // before code generation sees the same declarations.
  bool HandleTopLevelDecl(DeclGroupRef Group) override {
    for (Decl *D : Group)
      Finder(*this).TraverseDecl(D);
    return true;
  }

  void HandleInlineFunctionDefinition(FunctionDecl *FD) override { consider(FD); }

  // `declare target to(f) indirect` after f's definition: Sema reports the new attribute
  // to the AST mutation listener.
  void DeclarationMarkedOpenMPDeclareTarget(const Decl *D, const Attr *) override {
    if (const auto *FD = dyn_cast<FunctionDecl>(D))
      consider(const_cast<FunctionDecl *>(FD));
  }

  ASTMutationListener *GetASTMutationListener() override { return this; }

  // Whatever the steps above could not see (e.g. a declaration inside a construct that
  // reached us whole), and the diagnostic for functions this unit only declares.
  void HandleTranslationUnit(ASTContext &Ctx) override {
    Finder(*this).TraverseDecl(Ctx.getTranslationUnitDecl());
    markVirtuallyCalledClasses(Ctx);
    registerDeviceClasses(Ctx);
    if (isDeviceCompile(Ctx))
      rejectRuntimeOnlyConstructs(Ctx);
    // Host and device compile the same source: say it once, in the host compile.
    if (isDeviceCompile(Ctx))
      return;
    DiagnosticsEngine &Diags = Ctx.getDiagnostics();
    unsigned Id = Diags.getCustomDiagID(
        DiagnosticsEngine::Warning,
        "function %0 is 'declare target indirect' but this translation unit does not "
        "define it: no offload entry is made for it here, so a pointer to it is "
        "translated on the device only if the translation unit that defines it also "
        "marks it indirect");
    for (const FunctionDecl *FD : Indirect)
      if (!FD->isDefined())
        Diags.Report(FD->getLocation(), Id) << FD;
  }

private:
  struct Finder : RecursiveASTVisitor<Finder> {
    explicit Finder(IndirectConsumer &C) : C(C) {}
    bool shouldVisitTemplateInstantiations() const { return true; }
    bool VisitFunctionDecl(FunctionDecl *FD) {
      C.consider(FD);
      return true;
    }
    bool VisitCXXRecordDecl(CXXRecordDecl *RD) {
      if (RD->isThisDeclarationADefinition() && C.SeenRecords.insert(RD).second)
        C.Records.push_back(RD);
      return true;
    }
    IndirectConsumer &C;
  };

  // Classes whose virtual functions device code calls, though not `declare target`:
  // the call's class and every class of this unit derived from it may be the object's
  // dynamic type, so every function of their vtable groups becomes `declare target`
  // (implicitly, as clang makes a function called from device code), which makes them
  // device classes. Repeated until no new call appears (those functions' bodies are
  // device code now).
  void markVirtuallyCalledClasses(ASTContext &Ctx) {
    auto *VTables = dyn_cast<ItaniumVTableContext>(Ctx.getVTableContext());
    if (!VTables)
      return;
    struct CallFinder : RecursiveASTVisitor<CallFinder> {
      bool shouldVisitTemplateInstantiations() const { return true; }
      void add(const CXXRecordDecl *RD) {
        if (RD && RD->hasDefinition())
          Called.insert(RD->getDefinition()->getCanonicalDecl());
      }
      bool VisitCXXMemberCallExpr(CXXMemberCallExpr *E) {
        if (const CXXMethodDecl *MD = E->getMethodDecl())
          if (MD->isVirtual())
            add(MD->getParent());
        return true;
      }
      bool VisitCXXDeleteExpr(CXXDeleteExpr *E) {
        if (const CXXRecordDecl *RD = E->getDestroyedType()->getAsCXXRecordDecl())
          if (RD->hasDefinition() && RD->getDefinition()->getDestructor() &&
              RD->getDefinition()->getDestructor()->isVirtual())
            add(RD);
        return true;
      }
      llvm::SmallPtrSet<const CXXRecordDecl *, 8> Called;
    };
    llvm::SmallPtrSet<const CXXMethodDecl *, 16> Marked;
    llvm::SmallPtrSet<const CXXRecordDecl *, 16> Warned; // each class considered once
    for (bool Changed = true; Changed;) {
      Changed = false;
      CallFinder Calls;
      traverseDeviceCode(Ctx, Calls);
      for (CXXRecordDecl *RD : Records) {
        if (!hasVTableGroup(RD))
          continue;
        bool Reached = llvm::any_of(Calls.Called, [&](const CXXRecordDecl *C) {
          return RD->getCanonicalDecl() == C || RD->isDerivedFrom(C);
        });
        if (!Reached || !Warned.insert(RD).second)
          continue;
        if (const CXXMethodDecl *Elsewhere = definedElsewhere(RD, *VTables)) {
          warnDefinedElsewhere(Ctx, RD, Elsewhere);
          continue;
        }
        for (const CXXMethodDecl *MD : slotFunctions(RD, *VTables)) {
          if (isDeviceFunction(MD) || !Marked.insert(MD->getCanonicalDecl()).second)
            continue;
          for (FunctionDecl *D : const_cast<CXXMethodDecl *>(MD)->redecls())
            D->addAttr(OMPDeclareTargetDeclAttr::CreateImplicit(
                Ctx, OMPDeclareTargetDeclAttr::MT_To, OMPDeclareTargetDeclAttr::DT_Any,
                nullptr, false, 0, SourceRange(MD->getLocation())));
          Changed = true;
        }
      }
    }
  }

  // A function of the class's vtable group that is not `declare target` and that this
  // unit does not define: no unit would emit its device version.
  static const CXXMethodDecl *definedElsewhere(const CXXRecordDecl *RD,
                                               ItaniumVTableContext &VTables) {
    for (const CXXMethodDecl *MD : slotFunctions(RD, VTables))
      if (!MD->isImplicit() && !isDeviceFunction(MD) && !MD->isDefined())
        return MD;
    return nullptr;
  }

  void warnDefinedElsewhere(ASTContext &Ctx, const CXXRecordDecl *RD,
                            const CXXMethodDecl *MD) {
    if (isDeviceCompile(Ctx))
      return; // said once, in the host compile
    DiagnosticsEngine &Diags = Ctx.getDiagnostics();
    unsigned Id = Diags.getCustomDiagID(
        DiagnosticsEngine::Warning,
        "device code calls virtual functions of %0, but its virtual function %1 is not "
        "'declare target' and is defined in another translation unit: %0's vtable is "
        "not made for the device here, so objects of %0 cannot be used on the device "
        "(omptarget-indirect); put %0 inside 'declare target'");
    Diags.Report(RD->getLocation(), Id) << RD << MD;
  }

  // The vtables of device classes (isDeviceClass) are emitted in both compiles wherever
  // the C++ rules put them (the key function's unit, else every unit that needs them),
  // as if the class were used there: the device then has the vtable and its functions
  // even where no device code constructs an object. In the host compile their symbols
  // are annotated on one carrier variable, for the IR pass to register.
  void registerDeviceClasses(ASTContext &Ctx) {
    if (!CI.hasSema())
      return;
    Sema &S = CI.getSema();
    std::vector<CXXRecordDecl *> Device;
    for (CXXRecordDecl *RD : Records)
      if (isDeviceClass(RD, Ctx))
        Device.push_back(RD);
    if (Device.empty())
      return;
    for (CXXRecordDecl *RD : Device)
      S.MarkVTableUsed(RD->getLocation(), RD, /*DefinitionRequired=*/true);
    S.DefineUsedVTables();
    S.PerformPendingInstantiations();
    // Sema hands code generation only the vtables its key function puts in this unit;
    // code generation emits the others (no key function) where an object is
    // constructed, which the device may never do: hand them over too.
    for (CXXRecordDecl *RD : Device)
      if (emitsVTableHere(RD, Ctx))
        CI.getASTConsumer().HandleVTable(RD);
    if (isDeviceCompile(Ctx))
      return;
    std::unique_ptr<ItaniumMangleContext> Mangle(
        ItaniumMangleContext::create(Ctx, Ctx.getDiagnostics()));
    SourceLocation Loc = Device.front()->getLocation();
    VarDecl *Carrier =
        VarDecl::Create(Ctx, Ctx.getTranslationUnitDecl(), Loc, Loc,
                        &Ctx.Idents.get(VtableCarrierName), Ctx.CharTy,
                        Ctx.getTrivialTypeSourceInfo(Ctx.CharTy, Loc), SC_Static);
    Carrier->setImplicit();
    Carrier->addAttr(UsedAttr::CreateImplicit(Ctx, Loc));
    for (CXXRecordDecl *RD : Device) {
      std::string Symbol;
      llvm::raw_string_ostream Out(Symbol);
      Mangle->mangleCXXVTable(RD, Out);
      Out.flush();
      Carrier->addAttr(AnnotateAttr::CreateImplicit(
          Ctx, std::string(VtableAnnotationPrefix) + Symbol, nullptr, 0, Loc));
    }
    Ctx.getTranslationUnitDecl()->addDecl(Carrier);
    CI.getASTConsumer().HandleTopLevelDecl(DeclGroupRef(Carrier));
  }

  // Device code has no C++ runtime: a dynamic_cast that would call __dynamic_cast
  // cannot run there (on a GPU the link fails; on the host device it reads a host-built
  // object's host vtable), nor, on a GPU, typeid (its null check and comparison call
  // the runtime). Say so at the construct, instead of a link error without a place.
  void rejectRuntimeOnlyConstructs(ASTContext &Ctx) {
    const llvm::Triple &Triple = Ctx.getTargetInfo().getTriple();
    const bool Gpu = Triple.isNVPTX() || Triple.isAMDGCN();
    struct CastFinder : RecursiveASTVisitor<CastFinder> {
      bool shouldVisitTemplateInstantiations() const { return true; }
      bool VisitCXXDynamicCastExpr(CXXDynamicCastExpr *E) {
        if (needsRuntimeDynamicCast(E))
          Found.insert(E);
        return true;
      }
      bool VisitCXXTypeidExpr(CXXTypeidExpr *E) {
        if (Gpu)
          Typeids.insert(E);
        return true;
      }
      bool Gpu = false;
      llvm::SmallPtrSet<CXXDynamicCastExpr *, 4> Found;
      llvm::SmallPtrSet<CXXTypeidExpr *, 4> Typeids;
    };
    CastFinder Casts;
    Casts.Gpu = Gpu;
    traverseDeviceCode(Ctx, Casts);
    DiagnosticsEngine &Diags = Ctx.getDiagnostics();
    unsigned TypeidId = Diags.getCustomDiagID(
        DiagnosticsEngine::Error,
        "typeid in device code for %0 needs the C++ runtime (__cxa_bad_typeid, strcmp), "
        "which the GPU does not have (omptarget-indirect): call a virtual function "
        "instead");
    for (CXXTypeidExpr *E : Casts.Typeids)
      Diags.Report(E->getBeginLoc(), TypeidId) << Triple.str();
    unsigned Id = Diags.getCustomDiagID(
        DiagnosticsEngine::Error,
        "dynamic_cast to %0 in device code needs the C++ runtime's __dynamic_cast, which "
        "the device does not have (omptarget-indirect): call a virtual function, compare "
        "typeid, or cast to 'void *' instead");
    for (CXXDynamicCastExpr *E : Casts.Found)
      Diags.Report(E->getBeginLoc(), Id) << E->getTypeAsWritten();
  }

  void consider(FunctionDecl *FD) {
    ASTContext &Ctx = CI.getASTContext();
    if (!isIndirect(FD, Ctx))
      return;
    annotate(FD, Ctx);
    const FunctionDecl *Canonical = FD->getCanonicalDecl();
    if (Seen.insert(Canonical).second)
      Indirect.push_back(Canonical);
  }

  CompilerInstance &CI;
  llvm::SmallPtrSet<CXXRecordDecl *, 16> SeenRecords;
  std::vector<CXXRecordDecl *> Records; // class definitions, in traversal order
  llvm::SmallPtrSet<const FunctionDecl *, 16> Seen;
  std::vector<const FunctionDecl *> Indirect; // in source order, for stable diagnostics
};

class IndirectAction : public PluginASTAction {
protected:
  std::unique_ptr<ASTConsumer> CreateASTConsumer(CompilerInstance &CI,
                                                 llvm::StringRef) override {
    return std::make_unique<IndirectConsumer>(CI);
  }
  bool ParseArgs(const CompilerInstance &, const std::vector<std::string> &) override {
    return true;
  }
  // Before the main action: the annotations must be on the declarations when code
  // generation, the main action's consumer, emits them.
  ActionType getActionType() override { return AddBeforeMainAction; }
};

} // namespace

// Defined in Rust (src/lib.rs): null when the process runs the LLVM this library is
// built for, else the message.
extern "C" const char *omp_indirect_host_llvm_error();

// Runs when the library is loaded, before clang uses anything in it. Loaded by another
// clang, this library's libclang-cpp N and the compiler's own libclang-cpp share
// unversioned C++ symbol names, so registering (or even returning normally to that
// compiler, whose exit then runs mixed-up destructors) is unsafe: say why and stop.
__attribute__((constructor)) static void registerIfBuiltForThisClang() {
  if (const char *Error = omp_indirect_host_llvm_error()) {
    fprintf(stderr, "error: %s\n", Error);
    fflush(stderr);
    _exit(1);
  }
  static FrontendPluginRegistry::Add<IndirectAction> Registration(
      "omp-declare-target-indirect",
      "carry OpenMP 'declare target indirect' functions into IR");
}
