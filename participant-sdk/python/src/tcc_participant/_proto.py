"""The generated tcc.v1 stubs (protoc + grpc_python_plugin over proto/, at
build time; shipped in the wheel as the `tcc.v1` package)."""

try:
    from tcc.v1 import coordinator_pb2, coordinator_pb2_grpc  # noqa: F401
    from tcc.v1 import participant_pb2, participant_pb2_grpc  # noqa: F401
except ImportError as e:  # a source checkout without the build's stubs
    raise ImportError(
        "tcc_participant needs the generated tcc.v1 stubs: install the wheel, or put "
        "<build>/participant-sdk/python/gen on PYTHONPATH (cmake builds them)") from e
