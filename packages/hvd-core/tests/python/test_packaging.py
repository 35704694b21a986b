# test_packaging.py - the installed hvd-core as a native dependency: public
# headers compile as C and C++, the library exports only hvd_ symbols, the
# CMake package config and hvd-core-config build a C program that runs an
# allreduce alone and as two ranks, and the ABI version macros match the
# library. Needs hvd-core pip-installed in the running environment.
import ctypes
import os
import pathlib
import re
import shutil
import subprocess
import struct
import sys

import pytest

PACKAGE_ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCE_HEADERS = sorted(p.name for p in (PACKAGE_ROOT / "include" / "hvd").glob("*.h"))

from horovod.common import config  # noqa: E402

try:
    LIBRARY = config.get_library_path()
    INCLUDE_DIR = config.get_include_dir()
except FileNotFoundError as e:  # collected, but nothing to test against
    pytest.skip("hvd-core is not installed: %s" % e, allow_module_level=True)

C_COMPILER = shutil.which("cc") or shutil.which("gcc")
CXX_COMPILER = shutil.which("c++") or shutil.which("g++")
needs_c = pytest.mark.skipif(C_COMPILER is None, reason="no C compiler")
needs_cxx = pytest.mark.skipif(CXX_COMPILER is None, reason="no C++ compiler")
needs_cmake = pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake not found")


def _config_command():
    """hvd-core-config as installed, or the same entry point through Python."""
    script = shutil.which("hvd-core-config")
    return [script] if script else [sys.executable, "-m", "horovod.common.config"]


def _hvd_core_config(*flags):
    result = subprocess.run(_config_command() + list(flags), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def _clean_env(**extra):
    """The current environment without any HOROVOD_* job description."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_", "OMPI_", "PMI_"))}
    env.update(extra)
    return env


# -- headers -------------------------------------------------------------------

def test_installed_headers_match_the_source_tree():
    installed = sorted(p.name for p in pathlib.Path(INCLUDE_DIR, "hvd").glob("*.h"))
    assert installed == SOURCE_HEADERS


@needs_c
@pytest.mark.parametrize("header", SOURCE_HEADERS)
def test_public_header_compiles_as_strict_c99(header, tmp_path):
    source = tmp_path / "use_header.c"
    source.write_text('#include "hvd/%s"\nint main(void) { return 0; }\n' % header)
    result = subprocess.run([C_COMPILER, "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic",
                             "-fsyntax-only", "-I", INCLUDE_DIR, str(source)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@needs_cxx
@pytest.mark.parametrize("header", SOURCE_HEADERS)
def test_public_header_compiles_as_cxx(header, tmp_path):
    source = tmp_path / "use_header.cc"
    source.write_text('#include "hvd/%s"\nint main() { return 0; }\n' % header)
    result = subprocess.run([CXX_COMPILER, "-std=c++11", "-Wall", "-Wextra", "-Werror",
                             "-pedantic", "-fsyntax-only", "-I", INCLUDE_DIR, str(source)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


# -- exported symbols ----------------------------------------------------------

def _exported_symbols():
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) not found")
    result = subprocess.run([nm, "-D", "--defined-only", LIBRARY], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    symbols = []
    for line in result.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 2:
            symbols.append((fields[-2], fields[-1]))  # (type, name)
    return symbols


def _declared_functions():
    text = "\n".join((PACKAGE_ROOT / "include" / "hvd" / h).read_text() for h in SOURCE_HEADERS)
    return set(re.findall(r"HVD_EXPORT[^;(]*?\b(hvd_\w+)\s*\(", text))


def test_library_exports_only_hvd_symbols():
    # Version-script node names (e.g. "HVD_1.0") show up as absolute symbols;
    # they are not code and are allowed.
    unexpected = [name for kind, name in _exported_symbols()
                  if not name.startswith("hvd_") and not (kind == "A" and name.startswith("HVD_"))]
    assert unexpected == [], "libhvd_core.so exports non-hvd_ symbols: %s" % unexpected[:20]


def test_library_exports_every_declared_function_and_nothing_undeclared():
    exported = {name.split("@")[0] for kind, name in _exported_symbols() if name.startswith("hvd_")}
    declared = _declared_functions()
    assert declared, "found no HVD_EXPORT declarations in the headers"
    assert sorted(declared - exported) == [], "declared but not exported"
    assert sorted(exported - declared) == [], "exported but not declared in include/hvd"


# -- version -------------------------------------------------------------------

def _header_api_version():
    text = (pathlib.Path(INCLUDE_DIR) / "hvd" / "c_api.h").read_text()
    major = int(re.search(r"#define\s+HVD_API_MAJOR\s+(\d+)", text).group(1))
    minor = int(re.search(r"#define\s+HVD_API_MINOR\s+(\d+)", text).group(1))
    return major, minor


def test_abi_version_macros_match_the_library():
    library = ctypes.CDLL(LIBRARY)
    major, minor = ctypes.c_int32(-1), ctypes.c_int32(-1)
    library.hvd_get_api_version(ctypes.byref(major), ctypes.byref(minor))
    assert (major.value, minor.value) == _header_api_version()


def test_abi_changelog_has_an_entry_for_the_current_minor():
    major, minor = _header_api_version()
    changelog = (PACKAGE_ROOT.parents[1] / "docs" / "abi_changelog.md")
    if not changelog.exists():
        pytest.skip("docs/abi_changelog.md is not in this checkout")
    assert re.search(r"^##\s+%d\.%d\b" % (major, minor), changelog.read_text(), re.M)


def test_library_version_string_matches_the_package():
    library = ctypes.CDLL(LIBRARY)
    library.hvd_get_version_string.restype = ctypes.c_char_p
    assert library.hvd_get_version_string().decode() == _hvd_core_config("--version")


# -- hvd-core-config -----------------------------------------------------------

def test_hvd_core_config_reports_existing_locations():
    assert os.path.isfile(os.path.join(_hvd_core_config("--includedir"), "hvd", "c_api.h"))
    assert os.path.isfile(os.path.join(_hvd_core_config("--libdir"), "libhvd_core.so"))
    assert os.path.isfile(os.path.join(_hvd_core_config("--cmakedir"), "hvd_coreConfig.cmake"))
    assert _hvd_core_config("--library") == LIBRARY


def test_hvd_core_config_without_options_prints_usage_and_fails():
    result = subprocess.run(_config_command(), capture_output=True, text=True)
    assert result.returncode != 0 and "usage" in result.stderr


@needs_c
def test_program_built_with_cflags_and_libs_runs(tmp_path):
    source = tmp_path / "version.c"
    source.write_text(
        '#include <stdio.h>\n#include "hvd/c_api.h"\n'
        "int main(void) {\n"
        "  int32_t major, minor;\n"
        "  hvd_get_api_version(&major, &minor);\n"
        "  printf(\"%d.%d %s\\n\", (int)major, (int)minor, hvd_get_version_string());\n"
        "  return major == HVD_API_MAJOR && minor == HVD_API_MINOR ? 0 : 1;\n"
        "}\n")
    binary = tmp_path / "version"
    command = ([C_COMPILER, "-std=c99", "-Wall", "-Werror", str(source), "-o", str(binary)]
               + _hvd_core_config("--cflags").split() + _hvd_core_config("--libs").split())
    build = subprocess.run(command, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    # No LD_LIBRARY_PATH: --libs carries an rpath.
    run = subprocess.run([str(binary)], capture_output=True, text=True, env=_clean_env())
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.split()[1] == _hvd_core_config("--version")


# -- a C program built with find_package(hvd_core) -----------------------------

@pytest.fixture(scope="module")
def allreduce_example(tmp_path_factory):
    """tests/c built as a downstream project against the installed package."""
    if shutil.which("cmake") is None or C_COMPILER is None:
        pytest.skip("cmake and a C compiler are needed")
    build = tmp_path_factory.mktemp("allreduce_example_build")
    for command in (["cmake", "-S", str(PACKAGE_ROOT / "tests" / "c"), "-B", str(build),
                     "-Dhvd_core_DIR=" + _hvd_core_config("--cmakedir")],
                    ["cmake", "--build", str(build), "-j2"]):
        result = subprocess.run(command, capture_output=True, text=True)
        assert result.returncode == 0, "%s\n%s\n%s" % (command, result.stdout, result.stderr)
    return build / "allreduce_example"


@needs_cmake
def test_c_example_allreduce_runs_as_a_single_process(allreduce_example):
    result = subprocess.run([str(allreduce_example)], capture_output=True, text=True,
                            env=_clean_env(), timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rank 0 of 1: allreduce result 1 2 3 4 ok" in result.stdout
    assert "rank 0 of 1: hvd_enqueue_wait result ok" in result.stdout


@needs_cmake
def test_c_abi_takes_current_and_larger_structs_and_refuses_smaller_ones(allreduce_example):
    # Built with the example: 1.0-sized structs work, smaller ones are refused
    # naming the struct, and a later minor's larger struct is written only as
    # far as this library's fields go.
    result = subprocess.run([str(allreduce_example.parent / "abi_structs")], capture_output=True, text=True,
                            env=_clean_env(), timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "abi structs ok" in result.stdout


@needs_cmake
def test_c_example_allreduce_sums_over_two_processes(allreduce_example):
    from horovod.common.rendezvous import RendezvousServer, make_secret

    secret = make_secret()
    size = 2
    with RendezvousServer(secret, host="127.0.0.1") as server:
        processes = []
        for rank in range(size):
            env = _clean_env(
                HOROVOD_RANK=str(rank), HOROVOD_SIZE=str(size),
                HOROVOD_LOCAL_RANK=str(rank), HOROVOD_LOCAL_SIZE=str(size),
                HOROVOD_CROSS_RANK="0", HOROVOD_CROSS_SIZE="1",
                HOROVOD_HOSTNAME="localhost",
                HOROVOD_GLOO_RENDEZVOUS_ADDR="127.0.0.1",
                HOROVOD_GLOO_RENDEZVOUS_PORT=str(server.port),
                HOROVOD_SECRET_KEY=secret)
            processes.append(subprocess.Popen([str(allreduce_example)], env=env, text=True,
                                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        outputs = []
        try:
            for process in processes:
                outputs.append(process.communicate(timeout=120)[0])
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        assert server.rejected_requests == 0
    report = "\n".join("rank %d (exit %s):\n%s" % (r, p.returncode, o)
                       for r, (p, o) in enumerate(zip(processes, outputs)))
    for rank, (process, output) in enumerate(zip(processes, outputs)):
        assert process.returncode == 0, report
        # Ranks contribute 1x and 2x [1 2 3 4]: the sum is 3x.
        assert "rank %d of 2: allreduce result 3 6 9 12 ok" % rank in output, report
        assert "rank %d of 2: hvd_enqueue_wait result ok" % rank in output, report


# -- locating the library ------------------------------------------------------

def test_library_path_env_var_overrides_the_installed_copy(monkeypatch, tmp_path):
    fake = tmp_path / "libhvd_core.so"
    fake.write_bytes(b"")
    monkeypatch.setenv("HVD_CORE_LIBRARY", str(fake))
    assert config.get_library_path() == str(fake)
    monkeypatch.setenv("HVD_CORE_LIBRARY", str(tmp_path / "missing.so"))
    with pytest.raises(FileNotFoundError, match="HVD_CORE_LIBRARY"):
        config.get_library_path()


# -- the Python side's view of the C structs -----------------------------------

_LAYOUT_PROGRAM = r'''
#include <stddef.h>
#include <stdio.h>
#include "hvd/c_api.h"
#define FIELD(type, field) printf("%s.%s %zu\n", #type, #field, offsetof(type, field))
#define SIZE(type, size) printf("%s %zu %zu\n", #type, (size_t)(size), sizeof(type))
int main(void) {
  FIELD(DLTensor, data); FIELD(DLTensor, device); FIELD(DLTensor, ndim); FIELD(DLTensor, dtype);
  FIELD(DLTensor, shape); FIELD(DLTensor, strides); FIELD(DLTensor, byte_offset);
  SIZE(DLTensor, sizeof(DLTensor));
  FIELD(DLManagedTensor, dl_tensor); FIELD(DLManagedTensor, manager_ctx); FIELD(DLManagedTensor, deleter);
  SIZE(DLManagedTensor, sizeof(DLManagedTensor));
  FIELD(hvd_tensor_args, input); FIELD(hvd_tensor_args, output); FIELD(hvd_tensor_args, splits);
  FIELD(hvd_tensor_args, num_splits); FIELD(hvd_tensor_args, name); FIELD(hvd_tensor_args, name_len);
  SIZE(hvd_tensor_args, HVD_TENSOR_ARGS_STRUCT_SIZE);
  FIELD(hvd_enqueue_args, collective); FIELD(hvd_enqueue_args, process_set_id); FIELD(hvd_enqueue_args, reduce_op);
  FIELD(hvd_enqueue_args, root_rank); FIELD(hvd_enqueue_args, prescale_factor);
  FIELD(hvd_enqueue_args, postscale_factor); FIELD(hvd_enqueue_args, tensors); FIELD(hvd_enqueue_args, num_tensors);
  FIELD(hvd_enqueue_args, alloc); FIELD(hvd_enqueue_args, alloc_ctx); FIELD(hvd_enqueue_args, on_done);
  FIELD(hvd_enqueue_args, on_done_ctx); FIELD(hvd_enqueue_args, flags); FIELD(hvd_enqueue_args, device_stream);
  SIZE(hvd_enqueue_args, HVD_ENQUEUE_ARGS_STRUCT_SIZE);
  FIELD(hvd_init_args, process_set_ranks); FIELD(hvd_init_args, process_set_sizes);
  FIELD(hvd_init_args, num_process_sets); SIZE(hvd_init_args, HVD_INIT_ARGS_STRUCT_SIZE);
  FIELD(hvd_topology, rank); FIELD(hvd_topology, size); FIELD(hvd_topology, local_rank);
  FIELD(hvd_topology, local_size); FIELD(hvd_topology, cross_rank); FIELD(hvd_topology, cross_size);
  FIELD(hvd_topology, is_homogeneous); SIZE(hvd_topology, HVD_TOPOLOGY_STRUCT_SIZE);
  FIELD(hvd_process_set_info, process_set_id); FIELD(hvd_process_set_info, rank);
  FIELD(hvd_process_set_info, size); FIELD(hvd_process_set_info, ranks);
  FIELD(hvd_process_set_info, ranks_capacity); FIELD(hvd_process_set_info, fast_lane_calls);
  FIELD(hvd_process_set_info, request_batches);
  SIZE(hvd_process_set_info, HVD_PROCESS_SET_INFO_STRUCT_SIZE);
  FIELD(hvd_result, tensor_index); FIELD(hvd_result, output); FIELD(hvd_result, received_splits);
  FIELD(hvd_result, num_received_splits); FIELD(hvd_result, last_joined_rank);
  SIZE(hvd_result, HVD_RESULT_STRUCT_SIZE);
  FIELD(hvd_gpu_info, cuda_built); FIELD(hvd_gpu_info, cuda_available); FIELD(hvd_gpu_info, device_count);
  FIELD(hvd_gpu_info, nccl_version); FIELD(hvd_gpu_info, message); FIELD(hvd_gpu_info, message_len);
  SIZE(hvd_gpu_info, HVD_GPU_INFO_STRUCT_SIZE);
  return 0;
}
'''


@pytest.fixture(scope="module")
def c_layouts(tmp_path_factory):
    """Field offsets and (struct size macro, sizeof) of the header's structs, from a C compiler."""
    if C_COMPILER is None:
        pytest.skip("no C compiler")
    folder = tmp_path_factory.mktemp("layouts")
    (folder / "layouts.c").write_text(_LAYOUT_PROGRAM)
    build = subprocess.run([C_COMPILER, "-std=c99", str(folder / "layouts.c"), "-o", str(folder / "layouts")]
                           + _hvd_core_config("--cflags").split(), capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    layouts = {}
    printed = subprocess.run([str(folder / "layouts")], capture_output=True, text=True, check=True).stdout
    for line in printed.splitlines():
        name, *numbers = line.split()
        layouts[name] = tuple(int(n) for n in numbers) if len(numbers) > 1 else int(numbers[0])
    return layouts


def _offsets(fmt):
    """The byte offset of each field of a little-endian struct module format ('x' pad bytes are no field)."""
    codes = re.findall(r"[a-zA-Z]", fmt.format)
    return [struct.calcsize("<" + "".join(codes[:i])) for i in range(len(codes)) if codes[i] != "x"]


def test_packed_argument_layouts_match_the_header(c_layouts):
    # engine_calls.py packs the enqueue arguments with struct formats for speed;
    # every field must sit where the C compiler puts it.
    from horovod.common import engine_calls
    # data, device type, device id, ndim, code, bits, lanes, shape, strides, offset
    dl = _offsets(engine_calls._DLTENSOR)
    assert [dl[0], dl[1], dl[3], dl[4], dl[7], dl[8], dl[9]] == [
        c_layouts["DLTensor." + f] for f in ("data", "device", "ndim", "dtype", "shape", "strides", "byte_offset")]
    assert engine_calls._DLTENSOR.size == c_layouts["DLTensor"][1]
    # read_owned unpacks a result's whole DLManagedTensor: the DLTensor's fields, manager_ctx, deleter
    managed = _offsets(engine_calls._MANAGED)
    assert managed[:10] == dl and managed[10:] == [
        c_layouts["DLManagedTensor.manager_ctx"], c_layouts["DLManagedTensor.deleter"]]
    assert c_layouts["DLManagedTensor.dl_tensor"] == 0
    assert engine_calls._MANAGED.size == c_layouts["DLManagedTensor"][1]
    ta = _offsets(engine_calls._TENSOR_ARGS)
    assert ta[1:] == [c_layouts["hvd_tensor_args." + f] for f in ("input", "output", "splits", "num_splits", "name",
                                                                   "name_len")]
    assert engine_calls._TENSOR_ARGS.size == c_layouts["hvd_tensor_args"][0]
    ea = _offsets(engine_calls._ENQUEUE_ARGS)
    assert ea[1:] == [c_layouts["hvd_enqueue_args." + f] for f in (
        "collective", "process_set_id", "reduce_op", "root_rank", "prescale_factor", "postscale_factor", "tensors",
        "num_tensors", "alloc", "alloc_ctx", "on_done", "on_done_ctx", "flags", "device_stream")]
    assert engine_calls._ENQUEUE_ARGS_SIZE == c_layouts["hvd_enqueue_args"][0]
    assert engine_calls._ENQUEUE_ARGS_SPAN == c_layouts["hvd_enqueue_args"][1]
    assert engine_calls._ON_DONE_OFFSET == c_layouts["hvd_enqueue_args.on_done"]
    assert engine_calls._ON_DONE_OFFSET + 8 == c_layouts["hvd_enqueue_args.on_done_ctx"]


@pytest.mark.parametrize("structure,c_name", [("InitArgs", "hvd_init_args"), ("Topology", "hvd_topology"),
                                              ("ProcessSetInfo", "hvd_process_set_info"), ("Result", "hvd_result"),
                                              ("GpuInfo", "hvd_gpu_info")])
def test_ctypes_structures_match_the_header(c_layouts, structure, c_name):
    from horovod.common import c_api
    cls = getattr(c_api, structure)
    for field, _ in cls._fields_[1:]:
        assert getattr(cls, field).offset == c_layouts[c_name + "." + field], field
    assert ctypes.sizeof(cls) == c_layouts[c_name][1]
