//! Compiles the control plane's protobuf definitions with protox (a protobuf compiler in
//! Rust), so that building needs no `protoc` on the machine.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/weir_cluster.proto");
    let descriptors = protox::compile(["weir_cluster.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
