//! Compiles `proto/border/v1/border.proto` (client and server) and gobgpd's
//! vendored API `proto/gobgp/*.proto` (client only) with protox, a protobuf
//! compiler in Rust, so building needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(["border/v1/border.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    let gobgp = protox::compile(["gobgp.proto", "attribute.proto"], ["proto/gobgp"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .compile_fds(gobgp)?;
    Ok(())
}
