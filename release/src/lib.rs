//! What a user installs, made: the plugin and compiler-plugin builds ([`plugin`],
//! [`compiler_plugin`]), the install ([`install`]: every file where install-layout
//! says, the clang config files, the self-test programs) and the packages ([`dist`]),
//! for each LLVM version a Debian release packages ([`llvm_release`]). xtask's
//! `build-plugin`, `install` and `dist` call it; the test harness installs through it.

pub mod compiler_plugin;
pub mod cuda;
pub mod dist;
pub mod install;
pub mod llvm_release;
pub mod plugin;
pub mod util;
