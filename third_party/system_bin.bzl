"""Exposes protoc and grpc_cpp_plugin from /usr/bin (not all of /usr/bin:
it has a symlink loop that breaks a plain local repository)."""

def _system_bin_impl(ctx):
    for tool in ["protoc", "grpc_cpp_plugin"]:
        path = ctx.which(tool)
        if path == None:
            fail("%s not found: apt-get install protobuf-compiler protobuf-compiler-grpc" % tool)
        ctx.symlink(path, tool)
    ctx.file("BUILD", 'exports_files(["protoc", "grpc_cpp_plugin"])\n')

system_bin = repository_rule(
    implementation = _system_bin_impl,
    local = True,
)
