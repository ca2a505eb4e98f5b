//! Builds `src/execl.c`: execl, execlp and execle are variadic, which
//! Rust cannot define (see `src/exec.rs`).
fn main() {
    println!("cargo:rerun-if-changed=src/execl.c");
    cc::Build::new()
        .file("src/execl.c")
        .flag_if_supported("-fvisibility=hidden")
        .warnings(true)
        .compile("ixora_execl");
}
