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
#include "clang/AST/ASTConsumer.h"
#include "clang/AST/ASTContext.h"
#include "clang/AST/ASTMutationListener.h"
#include "clang/AST/Attr.h"
#include "clang/AST/RecursiveASTVisitor.h"
#include "clang/Basic/Diagnostic.h"
#include "clang/Frontend/CompilerInstance.h"
#include "clang/Frontend/FrontendPluginRegistry.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <cstdio>
#include <memory>
#include <unistd.h>
#include <string>
#include <vector>

using namespace clang;

namespace {

// Must match the annotation the IR pass looks for (src/annotations.rs).
constexpr const char *IndirectAnnotation = "omp_declare_target_indirect";

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
    // Host and device compile the same source: say it once, in the host compile.
    if (Ctx.getLangOpts().OpenMPIsDevice)
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
    IndirectConsumer &C;
  };

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

// Defined in Rust (src/lib.rs): null when the process runs LLVM 16, else the message.
extern "C" const char *omp_indirect_host_llvm_error();

// Runs when the library is loaded, before clang uses anything in it. Loaded by another
// clang, this library's libclang-cpp 16 and the compiler's own libclang-cpp share
// unversioned C++ symbol names, so registering (or even returning normally to that
// compiler, whose exit then runs mixed-up destructors) is unsafe: say why and stop.
__attribute__((constructor)) static void registerIfClang16() {
  if (const char *Error = omp_indirect_host_llvm_error()) {
    fprintf(stderr, "error: %s\n", Error);
    fflush(stderr);
    _exit(1);
  }
  static FrontendPluginRegistry::Add<IndirectAction> Registration(
      "omp-declare-target-indirect",
      "carry OpenMP 'declare target indirect' functions into IR");
}
