/*
 * fastcall.c - the optional CPython accelerator of horovod.common's
 * synchronous collectives (_hvd_fastcall.abi3.so).
 *
 * A small allreduce costs the engine well under a microsecond; called through
 * ctypes, the Python side (buffer lookups, pointer packing, the foreign call's
 * argument conversion) costs twice that again. These functions do that part
 * in one C call: take the arrays' data pointers through the buffer protocol,
 * write them into the caller's packed hvd_enqueue_args block and run the
 * engine's enqueue-and-wait. Everything else (argument blocks, waiting out an
 * operation still in flight, errors) stays in engine_calls.py, which falls
 * back to ctypes when this module cannot be loaded.
 *
 * Built against the stable ABI of CPython 3.11 (the first with the buffer
 * protocol in the limited API) and not linked to libpython, so one file
 * serves every later CPython. It does not link libhvd_core either: bind()
 * receives the addresses of the C ABI functions from the already loaded
 * library, so both sides always talk to the same copy of the engine.
 */
#define PY_SSIZE_T_CLEAN
#define Py_LIMITED_API 0x030B0000
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "dlpack/dlpack.h"

typedef void* (*enqueue_wait_fn)(const void* args, double timeout_seconds, void** handle);
typedef void* (*enqueue_fn)(const void* args, void** handle);
typedef void* (*handle_wait_fn)(void* handle, double timeout_seconds);
typedef void* (*get_result_fn)(void* handle, void* result);
typedef void (*handle_release_fn)(void* handle);

static enqueue_wait_fn enqueue_wait;
static enqueue_fn enqueue;
static handle_wait_fn handle_wait;
static get_result_fn get_result;
static handle_release_fn handle_release;
static double wait_slice_seconds = 0.05;

/* hvd_result's leading fields (include/hvd/c_api.h); only these are touched. */
typedef struct {
  size_t struct_size;
  size_t tensor_index;
  DLManagedTensor* output;
} result_head;

static void* address_arg(PyObject* value) {
  return PyLong_AsVoidPtr(value); /* NULL with an error set for a non-int */
}

static int check_count(Py_ssize_t given, Py_ssize_t wanted, const char* function) {
  if (given == wanted) return 0;
  PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", function, wanted, given);
  return -1;
}

/* The data address of a writable, contiguous, non-empty buffer, or NULL
 * (no error set) when `object` offers no such buffer. */
static void* writable_data(PyObject* object) {
  Py_buffer view;
  void* data;
  if (PyObject_GetBuffer(object, &view, PyBUF_WRITABLE) != 0) {
    PyErr_Clear();
    return NULL;
  }
  data = view.len > 0 ? view.buf : NULL;
  /* The caller holds `object` for the whole call: the address stays valid
   * after the view is released (numpy's release frees nothing). */
  PyBuffer_Release(&view);
  return data;
}

/* The data address `object` stands for: an int is that address (0 for an
 * empty tensor); anything else must offer a writable, contiguous, non-empty
 * buffer. Returns 1; 0 (no error set) when it offers none; -1 on an error. */
static int data_of(PyObject* object, void** data) {
  if (PyLong_Check(object)) {
    *data = PyLong_AsVoidPtr(object);
    return PyErr_Occurred() ? -1 : 1;
  }
  *data = writable_data(object);
  return *data != NULL;
}

static void store_address(char* block, Py_ssize_t offset, void* address) {
  memcpy(block + offset, &address, sizeof address);
}

/* Enqueues the block and waits one slice without the GIL. Returns None when
 * the operation finished without error; otherwise the hvd_error* as an int
 * (0 when the operation is still in flight: its handle is in *slot). */
static PyObject* enqueue_and_wait(char* block, void** slot) {
  void* error;
  Py_BEGIN_ALLOW_THREADS
  error = enqueue_wait(block, wait_slice_seconds, slot);
  Py_END_ALLOW_THREADS
  if (error == NULL && *slot == NULL) Py_RETURN_NONE;
  return PyLong_FromVoidPtr(error);
}

/* bind(enqueue_wait, enqueue, handle_wait, handle_get_result, handle_release, wait_slice_seconds) */
static PyObject* bind(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  void* functions[5];
  double slice;
  Py_ssize_t i;
  if (check_count(nargs, 6, "bind") != 0) return NULL;
  for (i = 0; i < 5; ++i) {
    functions[i] = address_arg(args[i]);
    if (functions[i] == NULL) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bind() needs every function's address");
      return NULL;
    }
  }
  slice = PyFloat_AsDouble(args[5]);
  if (slice == -1.0 && PyErr_Occurred()) return NULL;
  enqueue_wait = (enqueue_wait_fn)functions[0];
  enqueue = (enqueue_fn)functions[1];
  handle_wait = (handle_wait_fn)functions[2];
  get_result = (get_result_fn)functions[3];
  handle_release = (handle_release_fn)functions[4];
  wait_slice_seconds = slice;
  Py_RETURN_NONE;
}

static int parse_block(PyObject* const* args, char** block, void*** slot) {
  *block = (char*)address_arg(args[0]);
  *slot = (void**)address_arg(args[1]);
  if (*block == NULL || *slot == NULL) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "null argument block or handle slot");
    return -1;
  }
  if (enqueue_wait == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "_hvd_fastcall is not bound to libhvd_core");
    return -1;
  }
  return 0;
}

/* run(block, slot, in_offset, out_offset, tensor, output): fills the block's
 * input data pointer (and the output's unless out_offset is None; `output`
 * is `tensor` or None for in place) and runs the collective. `tensor` and
 * `output` are arrays (their buffers' addresses are taken) or the data
 * addresses themselves (torch tensors offer no buffer protocol). False,
 * having done nothing, when an array has no writable contiguous non-empty
 * buffer; else as enqueue_and_wait. */
static PyObject* run(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  char* block;
  void** slot;
  Py_ssize_t in_offset, out_offset;
  void *in_data, *out_data;
  int found;
  if (check_count(nargs, 6, "run") != 0 || parse_block(args, &block, &slot) != 0) return NULL;
  in_offset = PyLong_AsSsize_t(args[2]);
  out_offset = args[3] == Py_None ? -1 : PyLong_AsSsize_t(args[3]);
  if (PyErr_Occurred()) return NULL;
  found = data_of(args[4], &in_data);
  out_data = in_data;
  if (found == 1 && out_offset >= 0 && args[5] != args[4] && args[5] != Py_None) found = data_of(args[5], &out_data);
  if (found < 0) return NULL;
  if (found == 0) Py_RETURN_FALSE;
  store_address(block, in_offset, in_data);
  if (out_offset >= 0) store_address(block, out_offset, out_data);
  return enqueue_and_wait(block, slot);
}

/* A host result of at most `limit` bytes as (bytearray of its bytes, shape
 * tuple), the engine's copy freed; NULL (no error set) for a larger or
 * device result, or when `limit` is 0: the caller takes it over as it is. */
static PyObject* copied_result(DLManagedTensor* managed, Py_ssize_t limit) {
  const DLTensor* t = &managed->dl_tensor;
  PyObject *data, *shape, *pair;
  Py_ssize_t bytes = (t->dtype.bits * t->dtype.lanes + 7) / 8;
  int i;
  if (limit <= 0 || t->device.device_type != kDLCPU) return NULL;
  for (i = 0; i < t->ndim; ++i) bytes *= (Py_ssize_t)t->shape[i];
  if (bytes > limit) return NULL;
  shape = PyTuple_New(t->ndim);
  if (shape == NULL) return NULL;
  for (i = 0; i < t->ndim; ++i) {
    PyObject* extent = PyLong_FromLongLong((long long)t->shape[i]);
    if (extent == NULL) {
      Py_DECREF(shape);
      return NULL;
    }
    PyTuple_SetItem(shape, i, extent);
  }
  data = PyByteArray_FromStringAndSize((const char*)t->data + t->byte_offset, bytes);
  if (data == NULL) {
    Py_DECREF(shape);
    return NULL;
  }
  pair = PyTuple_Pack(2, data, shape);
  Py_DECREF(data);
  Py_DECREF(shape);
  if (pair != NULL && managed->deleter != NULL) managed->deleter(managed);
  return pair;
}

/* run_owned(block, slot, in_offset, tensor, result, copy_limit): a
 * collective whose result the engine allocates (allgather, reducescatter);
 * `tensor` is the input array, or its data address as an int. When the
 * operation finished within one slice: a host result of at most
 * copy_limit bytes as (bytearray, shape) with the engine's copy freed, any
 * other as its DLManagedTensor address (the caller owns it). False, having
 * done nothing, when `tensor` has no writable contiguous non-empty buffer.
 * Else a 1-tuple holding the hvd_error* (0: none) for the caller to finish:
 * with the handle still in *slot when enqueue succeeded and the wait did
 * not, else with *slot NULL. */
static PyObject* run_owned(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  char* block;
  void** slot;
  Py_ssize_t in_offset;
  Py_ssize_t copy_limit;
  void* in_data;
  int found;
  result_head* result;
  void* error;
  if (check_count(nargs, 6, "run_owned") != 0 || parse_block(args, &block, &slot) != 0) return NULL;
  in_offset = PyLong_AsSsize_t(args[2]);
  result = (result_head*)address_arg(args[4]);
  copy_limit = PyLong_AsSsize_t(args[5]);
  if (PyErr_Occurred()) return NULL;
  if (result == NULL) {
    PyErr_SetString(PyExc_ValueError, "null hvd_result");
    return NULL;
  }
  found = data_of(args[3], &in_data);
  if (found < 0) return NULL;
  if (found == 0) Py_RETURN_FALSE;
  store_address(block, in_offset, in_data);
  Py_BEGIN_ALLOW_THREADS
  *slot = NULL;
  error = enqueue(block, slot);
  if (error == NULL) {
    error = handle_wait(*slot, wait_slice_seconds);
    if (error == NULL) {
      result->tensor_index = 0;
      error = get_result(*slot, result);
      handle_release(*slot);
      *slot = NULL;
    }
  }
  Py_END_ALLOW_THREADS
  if (error == NULL && result->output != NULL) {
    DLManagedTensor* managed = result->output;
    PyObject* copied = copied_result(managed, copy_limit);
    if (copied != NULL || PyErr_Occurred()) return copied;  /* on an error, the result leaks: memory was short */
    return PyLong_FromVoidPtr(managed);
  }
  return Py_BuildValue("(N)", PyLong_FromVoidPtr(error));
}

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL, "Takes the engine's function addresses."},
    {"run", (PyCFunction)(void (*)(void))run, METH_FASTCALL, "Runs a packed collective on arrays or addresses."},
    {"run_owned", (PyCFunction)(void (*)(void))run_owned, METH_FASTCALL,
     "Runs a packed collective whose result the engine allocates."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_hvd_fastcall", "Optional C calls for horovod.common's synchronous collectives.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__hvd_fastcall(void) { return PyModule_Create(&module); }
