//! Builds the crash injector (`src/crash_injector.c`) into a shared library for LD_PRELOAD,
//! with the C compiler the `cc` crate finds, and tells the crate where it is.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let source = "src/crash_injector.c";
    println!("cargo:rerun-if-changed={source}");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let library = out.join("libweir_crash_injector.so");
    let compiler = cc::Build::new().cargo_metadata(false).get_compiler();
    let status = Command::new(compiler.path())
        .args([
            "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-o",
        ])
        .arg(&library)
        .arg(source)
        .arg("-ldl")
        .status()
        .expect("cannot run the C compiler to build the crash injector");
    assert!(status.success(), "building the crash injector failed");
    println!("cargo:rustc-env=WEIR_CRASH_INJECTOR={}", library.display());
}
