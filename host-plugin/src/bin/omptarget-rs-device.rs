//! The isolated host device's process (`OMPTARGET_RS_ISOLATED=1`): started by the x86_64
//! plugin, never by hand. See host_plugin::backend::isolated.

fn main() {
    std::process::exit(host_plugin::backend::isolated::server::main());
}
