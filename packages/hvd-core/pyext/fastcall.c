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

/* The shape of `t` as a tuple of ints. */
static PyObject* shape_tuple(const DLTensor* t) {
  PyObject* shape = PyTuple_New(t->ndim);
  int i;
  if (shape == NULL) return NULL;
  for (i = 0; i < t->ndim; ++i) {
    PyObject* extent = PyLong_FromLongLong((long long)t->shape[i]);
    if (extent == NULL) {
      Py_DECREF(shape);
      return NULL;
    }
    PyTuple_SetItem(shape, i, extent);
  }
  return shape;
}

/* The byte size of a (contiguous) result. */
static Py_ssize_t result_bytes(const DLTensor* t) {
  Py_ssize_t bytes = (t->dtype.bits * t->dtype.lanes + 7) / 8;
  int i;
  for (i = 0; i < t->ndim; ++i) bytes *= (Py_ssize_t)t->shape[i];
  return bytes;
}

/* The byte size of a host result of at most `limit` bytes; -1 for a larger
 * or device result, or when `limit` is 0. */
static Py_ssize_t small_host_bytes(const DLTensor* t, Py_ssize_t limit) {
  Py_ssize_t bytes;
  if (limit <= 0 || t->device.device_type != kDLCPU) return -1;
  bytes = result_bytes(t);
  return bytes > limit ? -1 : bytes;
}

/* A host result of at most `limit` bytes as (bytearray of its bytes, shape
 * tuple), the engine's copy freed; NULL (no error set) for a larger or
 * device result, or when `limit` is 0: the caller takes it over as it is. */
static PyObject* copied_result(DLManagedTensor* managed, Py_ssize_t limit) {
  const DLTensor* t = &managed->dl_tensor;
  PyObject *data, *shape, *pair;
  const Py_ssize_t bytes = small_host_bytes(t, limit);
  if (bytes < 0) return NULL;
  shape = shape_tuple(t);
  if (shape == NULL) return NULL;
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

/* Enqueues `block` and waits one slice for it, without the GIL; when it
 * finished, takes its result into *result and releases the handle. Returns
 * the hvd_error* (NULL: none), with the handle still in *slot when enqueue
 * succeeded and the wait did not. */
static void* enqueue_wait_owned(char* block, void** slot, result_head* result) {
  void* error;
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
  return error;
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
  error = enqueue_wait_owned(block, slot, result);
  if (error == NULL && result->output != NULL) {
    DLManagedTensor* managed = result->output;
    PyObject* copied = copied_result(managed, copy_limit);
    if (copied != NULL || PyErr_Occurred()) return copied;  /* on an error, the result leaks: memory was short */
    return PyLong_FromVoidPtr(managed);
  }
  return Py_BuildValue("(N)", PyLong_FromVoidPtr(error));
}

/* ---- The steady state of a synchronous call, looked up in C ----------------
 *
 * A repeated call (the same collective, name, dtype, shape, op and factors)
 * reuses the argument block horovod.common packed for it the first time.
 * Looking that block up in a Python dict keyed by a fresh tuple, and taking
 * the arrays' addresses through the buffer protocol, cost more than a 4 KiB
 * allreduce does in the engine. A sync_table is one thread's table of such
 * blocks (engine_calls keeps one per thread, beside the thread's handle
 * slot); run_cached() finds the block from the call's own arguments and the
 * array's header, and remember() adds one.
 *
 * torch tensors (bind_torch) are taken too: horovod.torch's small allreduce
 * spent twice the engine's time in Python deciding that a tensor is plain
 * and finding its block. Without linking libtorch their fields are read
 * through the tensor's own attributes, which from C cost a fraction of the
 * interpreted checks. */

/* NumPy's array object begins with these fields (PyArrayObject_fields in
 * numpy/ndarraytypes.h). Extensions compiled against NumPy read them
 * directly (PyArray_DATA and its siblings are inline), which makes the
 * layout part of NumPy's ABI; bind_numpy() still checks it on probe arrays
 * against the buffer protocol and leaves it unused if anything differs. */
typedef struct {
  PyObject_HEAD
  char* data;
  int nd;
  Py_ssize_t* dimensions;
  Py_ssize_t* strides;
  PyObject* base;
  PyObject* descr;
  int flags;
} numpy_array_head;

#define NUMPY_C_CONTIGUOUS 0x0001
#define NUMPY_WRITEABLE 0x0400
#define MAX_CACHED_DIMS 8
/* A table holds a thread's repeated synchronous calls and, for
 * submit_cached, its asynchronous in-place ones: a model's gradients
 * submitted one by one are hundreds (102 in the training benchmark; in 64
 * places those evicted each other on every step). 1,024 places are about
 * 210 KiB for each thread that makes such calls. */
#define TABLE_SIZE 1024 /* a power of two */
#define TABLE_PROBES 8

static PyObject* ndarray_type; /* numpy.ndarray once its layout is checked; NULL: not used */
static PyObject* empty;        /* numpy.empty */

static int head_matches_buffer(PyObject* array, PyObject* dtype, int writable_contiguous) {
  const numpy_array_head* head = (const numpy_array_head*)array;
  const int wanted = writable_contiguous ? NUMPY_C_CONTIGUOUS | NUMPY_WRITEABLE : 0;
  Py_buffer view;
  int i, same;
  if ((PyObject*)Py_TYPE(array) != ndarray_type) return 0;
  if (PyObject_GetBuffer(array, &view, PyBUF_RECORDS_RO) != 0) {
    PyErr_Clear();
    return 0;
  }
  same = view.buf == (void*)head->data && view.ndim == head->nd && head->descr == dtype &&
         (head->flags & (NUMPY_C_CONTIGUOUS | NUMPY_WRITEABLE)) == wanted;
  for (i = 0; same && i < view.ndim; ++i)
    same = view.shape[i] == head->dimensions[i] && view.strides[i] == head->strides[i];
  PyBuffer_Release(&view);
  return same;
}

/* torch.Tensor, torch.empty_like and torch.strided once bind_torch() took
 * them; NULL: torch tensors are not taken. */
static PyObject* torch_tensor_type;
static PyObject* torch_empty_like;
static PyObject* torch_strided;
static PyObject *str_requires_grad, *str_is_cpu, *str_layout, *str_is_contiguous, *str_shape, *str_dtype,
    *str_data_ptr;

/* bind_numpy(ndarray, empty, plain, plain_dtype, view, view_dtype):
 * `plain` a writable C-contiguous array of two or more dimensions, `view` a
 * read-only strided view. True when their heads read as the buffer protocol
 * describes them: run_cached() is then used. */
static PyObject* bind_numpy(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  int usable;
  if (check_count(nargs, 6, "bind_numpy") != 0) return NULL;
  Py_CLEAR(ndarray_type);
  Py_CLEAR(empty);
  if (!PyType_Check(args[0])) Py_RETURN_FALSE;
  ndarray_type = Py_NewRef(args[0]);
  usable = head_matches_buffer(args[2], args[3], 1) && head_matches_buffer(args[4], args[5], 0);
  if (!usable) {
    Py_CLEAR(ndarray_type);
    Py_RETURN_FALSE;
  }
  empty = Py_NewRef(args[1]);
  Py_RETURN_TRUE;
}

/* bind_torch(Tensor, empty_like, strided): takes torch tensors from now on. */
static PyObject* bind_torch(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (check_count(nargs, 3, "bind_torch") != 0) return NULL;
  if (!PyType_Check(args[0]) || !PyCallable_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "bind_torch() needs torch.Tensor and torch.empty_like");
    return NULL;
  }
  Py_XDECREF(torch_empty_like);
  Py_XDECREF(torch_strided);
  Py_XDECREF(torch_tensor_type);
  torch_empty_like = Py_NewRef(args[1]);
  torch_strided = Py_NewRef(args[2]);
  torch_tensor_type = Py_NewRef(args[0]);
  Py_RETURN_NONE;
}

/* What the table needs of a plain tensor: an exact numpy.ndarray that is
 * writable and C-contiguous, or an exact torch.Tensor on the CPU, strided,
 * contiguous and not requiring gradients (those go through autograd);
 * non-empty with at most MAX_CACHED_DIMS dimensions either way. */
typedef struct {
  char* data;
  PyObject* dtype; /* borrowed: numpy's from the array; torch's dtypes live as long as torch */
  int nd;
  int is_torch;
  Py_ssize_t dims[MAX_CACHED_DIMS];
} plain_tensor;

static int plain_numpy(PyObject* object, plain_tensor* out) {
  const numpy_array_head* head = (const numpy_array_head*)object;
  if ((head->flags & (NUMPY_C_CONTIGUOUS | NUMPY_WRITEABLE)) != (NUMPY_C_CONTIGUOUS | NUMPY_WRITEABLE) ||
      head->nd > MAX_CACHED_DIMS)
    return 0;
  out->data = head->data;
  out->dtype = head->descr;
  out->nd = head->nd;
  out->is_torch = 0;
  memcpy(out->dims, head->dimensions, sizeof(Py_ssize_t) * (size_t)head->nd);
  return 1;
}

/* Whether attribute `name` of `object` is `wanted` (compared by identity). */
static int attribute_is(PyObject* object, PyObject* name, PyObject* wanted) {
  PyObject* value = PyObject_GetAttr(object, name);
  int same = value == wanted;
  Py_XDECREF(value);
  return same;
}

/* Whether calling method `name` of `object` returns `wanted`; with the
 * result as an address in *address when `address` is not NULL. */
static int method_gives(PyObject* object, PyObject* name, PyObject* wanted, void** address) {
  PyObject* value = PyObject_CallMethodObjArgs(object, name, NULL);
  int ok = value != NULL && (address == NULL ? value == wanted : PyLong_CheckExact(value));
  if (ok && address != NULL) {
    *address = PyLong_AsVoidPtr(value);
    ok = *address != NULL;
  }
  Py_XDECREF(value);
  return ok;
}

static int plain_torch(PyObject* object, plain_tensor* out) {
  PyObject *shape, *dtype;
  void* data;
  Py_ssize_t i, nd;
  int ok;
  if (!attribute_is(object, str_requires_grad, Py_False) || !attribute_is(object, str_is_cpu, Py_True) ||
      !attribute_is(object, str_layout, torch_strided) || !method_gives(object, str_is_contiguous, Py_True, NULL))
    return 0;
  shape = PyObject_GetAttr(object, str_shape);
  ok = shape != NULL && PyTuple_Check(shape) && (nd = PyTuple_Size(shape)) <= MAX_CACHED_DIMS;
  for (i = 0; ok && i < nd; ++i) {
    out->dims[i] = PyLong_AsSsize_t(PyTuple_GetItem(shape, i));
    ok = out->dims[i] >= 0;
  }
  Py_XDECREF(shape);
  if (!ok) return 0;
  dtype = PyObject_GetAttr(object, str_dtype);
  if (dtype == NULL) return 0;
  out->dtype = dtype; /* see plain_tensor */
  Py_DECREF(dtype);
  if (!method_gives(object, str_data_ptr, NULL, &data)) return 0; /* 0: an empty tensor */
  out->data = (char*)data;
  out->nd = (int)nd;
  out->is_torch = 1;
  return 1;
}

/* Fills *out for a plain tensor (see plain_tensor); 0 for anything else,
 * with no error left set. */
static int plain_tensor_of(PyObject* object, plain_tensor* out) {
  PyObject* type = (PyObject*)Py_TYPE(object);
  Py_ssize_t elements = 1;
  int i, plain = 0;
  if (type == ndarray_type && ndarray_type != NULL) plain = plain_numpy(object, out);
  else if (type == torch_tensor_type && torch_tensor_type != NULL) plain = plain_torch(object, out);
  if (PyErr_Occurred()) PyErr_Clear(); /* whatever failed, the general path will say */
  if (!plain) return 0;
  for (i = 0; i < out->nd; ++i) elements *= out->dims[i];
  return elements > 0;
}

/* Reads a new output made like a plain tensor. torch.empty_like of a plain
 * tensor is one (unless a torch function mode made something else): only
 * its type and address are read. */
static int plain_output(PyObject* output, plain_tensor* out) {
  void* data;
  if ((PyObject*)Py_TYPE(output) != torch_tensor_type || torch_tensor_type == NULL)
    return plain_tensor_of(output, out);
  if (!method_gives(output, str_data_ptr, NULL, &data)) {
    PyErr_Clear();
    return 0;
  }
  out->data = (char*)data;
  return 1;
}

/* What a call is looked up by, besides the array's dtype and shape. */
typedef struct {
  long long collective, op, root_rank, process_set_id;
  double prescale, postscale;
  PyObject* name; /* a str or None, borrowed */
  int in_place;
  int asynchronous; /* 0: a synchronous call's block; else submit_cached's (see there) */
} call_key;

typedef struct {
  call_key key;           /* key.name: a strong reference */
  PyObject* owner;        /* the block's memory (a ctypes buffer); NULL: a free entry */
  PyObject* dtype;
  PyObject* shape;        /* the array's shape as a tuple: a new output is numpy.empty(shape, dtype) */
  int is_torch;           /* a torch call: a new output is torch.empty_like(tensor) */
  char* block;
  Py_ssize_t in_offset, out_offset;
  Py_uhash_t hash;
  int nd;
  Py_ssize_t dims[MAX_CACHED_DIMS];
} table_entry;

typedef struct {
  PyObject_HEAD
  PyObject* slot_owner;
  void** slot;
  PyObject* result_owner;
  result_head* result;      /* where an engine-allocated result is taken */
  Py_ssize_t copy_limit;    /* such a result of at most this many bytes comes back copied */
  PyObject* pending_output; /* an out-of-place result still being written when run_cached returned */
  table_entry entries[TABLE_SIZE];
} sync_table;

static PyObject* sync_table_type;

/* An engine-allocated host result handed to numpy (handed_over): its bytes
 * through the buffer protocol, writable, freed by the engine's deleter when
 * the last array over them is gone. Taking the memory over through Python
 * (an object with __array_interface__, a ctypes call of the deleter) cost
 * several microseconds a call. */
typedef struct {
  PyObject_HEAD
  DLManagedTensor* managed;
  void* data;
  Py_ssize_t bytes;
} owned_memory;

static PyObject* owned_memory_type;

static int owned_memory_getbuffer(PyObject* self, Py_buffer* view, int flags) {
  owned_memory* memory = (owned_memory*)self;
  return PyBuffer_FillInfo(view, self, memory->data, memory->bytes, 0, flags);
}

static void owned_memory_dealloc(PyObject* self) {
  owned_memory* memory = (owned_memory*)self;
  PyTypeObject* type = Py_TYPE(self);
  if (memory->managed != NULL && memory->managed->deleter != NULL) memory->managed->deleter(memory->managed);
  ((freefunc)PyType_GetSlot(type, Py_tp_free))(self);
  Py_DECREF(type);
}

static PyType_Slot owned_memory_slots[] = {
    {Py_tp_dealloc, (void*)owned_memory_dealloc},
    {Py_bf_getbuffer, (void*)owned_memory_getbuffer},
    {Py_tp_doc, (void*)"An engine-allocated result's memory, freed with the last array over it."},
    {0, NULL},
};

static PyType_Spec owned_memory_spec = {
    "_hvd_fastcall.owned_memory", sizeof(owned_memory), 0, Py_TPFLAGS_DEFAULT, owned_memory_slots,
};

/* The host result at `managed` as a numpy array of `dtype` over the
 * engine's memory (which the array then owns); NULL with an error set when
 * that failed (the result is freed), or the result's address as an int (the
 * caller takes it over) for a device result or without numpy bound. */
static PyObject* handed_over(DLManagedTensor* managed, PyObject* dtype) {
  const DLTensor* t = &managed->dl_tensor;
  owned_memory* memory;
  PyObject *shape, *array;
  if (ndarray_type == NULL || t->device.device_type != kDLCPU) return PyLong_FromVoidPtr(managed);
  memory = (owned_memory*)((allocfunc)PyType_GetSlot((PyTypeObject*)owned_memory_type, Py_tp_alloc))(
      (PyTypeObject*)owned_memory_type, 0);
  if (memory == NULL) {
    if (managed->deleter != NULL) managed->deleter(managed);
    return NULL;
  }
  memory->managed = managed;
  memory->data = (char*)t->data + t->byte_offset;
  memory->bytes = result_bytes(t);
  shape = shape_tuple(t);
  array = shape == NULL ? NULL : PyObject_CallFunctionObjArgs(ndarray_type, shape, dtype, memory, NULL);
  Py_XDECREF(shape);
  Py_DECREF(memory); /* the array holds it now; on failure this frees the result */
  return array;
}

static void clear_entry(table_entry* entry) {
  Py_CLEAR(entry->owner);
  Py_CLEAR(entry->dtype);
  Py_CLEAR(entry->shape);
  Py_CLEAR(entry->key.name);
}

static void sync_table_dealloc(PyObject* self) {
  sync_table* table = (sync_table*)self;
  PyTypeObject* type = Py_TYPE(self);
  int i;
  for (i = 0; i < TABLE_SIZE; ++i) clear_entry(&table->entries[i]);
  Py_CLEAR(table->slot_owner);
  Py_CLEAR(table->result_owner);
  Py_CLEAR(table->pending_output);
  ((freefunc)PyType_GetSlot(type, Py_tp_free))(self);
  Py_DECREF(type);
}

static PyType_Slot sync_table_slots[] = {
    {Py_tp_dealloc, (void*)sync_table_dealloc},
    {Py_tp_doc, (void*)"One thread's argument blocks of repeated synchronous calls."},
    {0, NULL},
};

static PyType_Spec sync_table_spec = {
    "_hvd_fastcall.sync_table", sizeof(sync_table), 0, Py_TPFLAGS_DEFAULT, sync_table_slots,
};

/* sync_table(slot_owner, slot_address, result_owner, result_address,
 * copy_limit): a table whose calls wait through the handle slot at
 * slot_address and take engine-allocated results into the hvd_result at
 * result_address (kept alive by the owners); see run_cached for copy_limit. */
static PyObject* new_sync_table(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  sync_table* table;
  void** slot;
  result_head* result;
  Py_ssize_t copy_limit;
  if (check_count(nargs, 5, "sync_table") != 0) return NULL;
  slot = (void**)address_arg(args[1]);
  result = (result_head*)address_arg(args[3]);
  copy_limit = PyLong_AsSsize_t(args[4]);
  if (PyErr_Occurred()) return NULL;
  if (slot == NULL || result == NULL) {
    PyErr_SetString(PyExc_ValueError, "null handle slot or hvd_result");
    return NULL;
  }
  table = (sync_table*)((allocfunc)PyType_GetSlot((PyTypeObject*)sync_table_type, Py_tp_alloc))(
      (PyTypeObject*)sync_table_type, 0);
  if (table == NULL) return NULL;
  /* tp_alloc zeroed the object: every entry is free. */
  table->slot_owner = Py_NewRef(args[0]);
  table->slot = slot;
  table->result_owner = Py_NewRef(args[2]);
  table->result = result;
  table->copy_limit = copy_limit;
  return (PyObject*)table;
}

static int exact_int(PyObject* value, long long* out) {
  if (!PyLong_CheckExact(value)) return 0;
  *out = PyLong_AsLongLong(value);
  return !PyErr_Occurred();
}

static int real_number(PyObject* value, double* out) {
  if (PyFloat_Check(value)) *out = PyFloat_AsDouble(value);
  else if (PyLong_CheckExact(value)) *out = PyLong_AsDouble(value);
  else return 0;
  return !PyErr_Occurred();
}

/* Reads args (table, collective, tensor, in_place, name, op, root_rank,
 * prescale, postscale, process_set_id) into *key, with `asynchronous` (see
 * call_key). 1: readable; 0 (no error set): something the Python path has
 * to take; -1: an error. */
static int read_call(PyObject* const* args, int asynchronous, sync_table** table, plain_tensor* array,
                     call_key* key, Py_uhash_t* hash) {
  int i;
  Py_hash_t name_hash;
  Py_uhash_t h;
  if ((PyObject*)Py_TYPE(args[0]) != sync_table_type) {
    PyErr_SetString(PyExc_TypeError, "the first argument must be a sync_table");
    return -1;
  }
  *table = (sync_table*)args[0];
  key->in_place = args[3] == Py_True;
  key->asynchronous = asynchronous;
  key->name = args[4];
  if (!plain_tensor_of(args[2], array) || (key->name != Py_None && !PyUnicode_CheckExact(key->name)) ||
      !exact_int(args[1], &key->collective) || !exact_int(args[5], &key->op) ||
      !exact_int(args[6], &key->root_rank) || !real_number(args[7], &key->prescale) ||
      !real_number(args[8], &key->postscale) || !exact_int(args[9], &key->process_set_id)) {
    if (PyErr_Occurred()) {
      if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
      PyErr_Clear();
    }
    return 0;
  }
  name_hash = key->name == Py_None ? 0 : PyObject_Hash(key->name);
  if (name_hash == -1) return -1;
  /* Unsigned: the mixing wraps around. */
  h = (Py_uhash_t)name_hash * 1000003u ^
      ((Py_uhash_t)key->collective * 31u + (Py_uhash_t)key->op * 7u + (Py_uhash_t)key->in_place +
       (Py_uhash_t)key->asynchronous * 2u);
  for (i = 0; i < array->nd; ++i) h = h * 1000003u ^ (Py_uhash_t)array->dims[i];
  *hash = h;
  return 1;
}

static int same_key(const table_entry* entry, const call_key* key, const plain_tensor* array, Py_uhash_t hash) {
  const call_key* k = &entry->key;
  if (entry->owner == NULL || entry->hash != hash || entry->dtype != array->dtype || entry->nd != array->nd ||
      k->collective != key->collective || k->in_place != key->in_place ||
      k->asynchronous != key->asynchronous || k->op != key->op ||
      k->root_rank != key->root_rank || k->process_set_id != key->process_set_id ||
      k->prescale != key->prescale || k->postscale != key->postscale ||
      memcmp(entry->dims, array->dims, sizeof(Py_ssize_t) * (size_t)array->nd) != 0)
    return 0;
  if (k->name == key->name) return 1;
  return k->name != Py_None && key->name != Py_None && PyUnicode_Compare(k->name, key->name) == 0;
}

static table_entry* find_entry(sync_table* table, const call_key* key, const plain_tensor* array, Py_uhash_t hash) {
  int i;
  for (i = 0; i < TABLE_PROBES; ++i) {
    table_entry* candidate = &table->entries[(hash + i) & (TABLE_SIZE - 1)];
    if (same_key(candidate, key, array, hash)) return candidate;
  }
  return NULL;
}

/* A table call whose result the engine allocates (allgather,
 * reducescatter: blocks without an output pointer); see run_cached. */
static PyObject* run_owned_entry(sync_table* table, const table_entry* entry, const plain_tensor* array) {
  void* error;
  DLManagedTensor* managed;
  Py_ssize_t bytes;
  PyObject *shape, *out;
  store_address(entry->block, entry->in_offset, array->data);
  error = enqueue_wait_owned(entry->block, table->slot, table->result);
  managed = table->result->output;
  if (error != NULL || managed == NULL) return Py_BuildValue("(N)", PyLong_FromVoidPtr(error));
  bytes = small_host_bytes(&managed->dl_tensor, table->copy_limit);
  if (bytes < 0) return handed_over(managed, entry->dtype);
  shape = shape_tuple(&managed->dl_tensor);
  out = shape == NULL ? NULL : PyObject_CallFunctionObjArgs(empty, shape, entry->dtype, NULL);
  Py_XDECREF(shape);
  if (out != NULL && (PyObject*)Py_TYPE(out) != ndarray_type) {
    Py_DECREF(out);
    return PyLong_FromVoidPtr(managed); /* the caller takes it over */
  }
  if (out != NULL && bytes > 0)
    memcpy(((numpy_array_head*)out)->data, (const char*)managed->dl_tensor.data + managed->dl_tensor.byte_offset,
           (size_t)bytes);
  if (managed->deleter != NULL) managed->deleter(managed);
  return out;
}

/* run_cached(table, collective, tensor, in_place, name, op, root_rank,
 * prescale, postscale, process_set_id): the call, when `table` has its
 * block and `tensor` is a plain tensor (see plain_tensor). Returns the result
 * (`tensor` in place, else a new array like it) once the operation has
 * finished; None, having done nothing, when the call is not in the table;
 * (hvd_error* as an int, result) when it failed or is still in flight (its
 * handle in the slot; the result is then also kept as the table's
 * pending_output until the next call, for an interrupt between here and
 * the caller). A call whose result the engine allocates returns it as a
 * new array when it is a host result of at most the table's copy_limit
 * bytes (the engine's freed), as an array over the engine's memory when it
 * is a larger host one (handed_over), else as its DLManagedTensor address
 * (the caller owns it), or a 1-tuple holding the hvd_error* (0: none) when it
 * failed or is still in flight, for the caller to finish. */
static PyObject* run_cached(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  sync_table* table;
  plain_tensor array, out_array;
  call_key key;
  Py_uhash_t hash;
  table_entry* entry = NULL;
  PyObject* output;
  PyObject* outcome;
  int readable;
  if (check_count(nargs, 10, "run_cached") != 0) return NULL;
  readable = read_call(args, 0, &table, &array, &key, &hash);
  if (readable <= 0) return readable < 0 ? NULL : Py_NewRef(Py_None);
  entry = find_entry(table, &key, &array, hash);
  if (entry == NULL || enqueue_wait == NULL) return Py_NewRef(Py_None);
  Py_CLEAR(table->pending_output);
  if (entry->out_offset < 0) return run_owned_entry(table, entry, &array);
  out_array = array;
  if (key.in_place) {
    output = Py_NewRef(args[2]);
  } else {
    output = entry->is_torch ? PyObject_CallFunctionObjArgs(torch_empty_like, args[2], NULL)
                             : PyObject_CallFunctionObjArgs(empty, entry->shape, entry->dtype, NULL);
    if (output == NULL) return NULL;
    if (!plain_output(output, &out_array)) {
      Py_DECREF(output);
      return Py_NewRef(Py_None);
    }
  }
  store_address(entry->block, entry->in_offset, array.data);
  store_address(entry->block, entry->out_offset, out_array.data);
  outcome = enqueue_and_wait(entry->block, table->slot);
  if (outcome == Py_None) {
    Py_DECREF(outcome);
    return output;
  }
  if (outcome == NULL) {
    Py_DECREF(output);
    return NULL;
  }
  if (!key.in_place) table->pending_output = Py_NewRef(output);
  return Py_BuildValue("(NN)", outcome, output);
}

/* remember(table, collective, tensor, in_place, name, op, root_rank,
 * prescale, postscale, process_set_id, owner, block, in_offset,
 * out_offset[, asynchronous]): adds the call's block (at address `block`,
 * kept alive by `owner`; out_offset None: the block has no output pointer)
 * to the table, replacing an older one when its places are taken; a block
 * for submit_cached when `asynchronous` (see there) is given and not 0.
 * False when the call is not one run_cached() (or submit_cached()) takes. */
static PyObject* remember(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  sync_table* table;
  plain_tensor array;
  call_key key;
  Py_uhash_t hash;
  table_entry* entry = NULL;
  char* block;
  Py_ssize_t in_offset, out_offset;
  long long asynchronous = 0;
  int i, readable;
  if (nargs != 15 && check_count(nargs, 14, "remember") != 0) return NULL;
  if (nargs == 15 && !exact_int(args[14], &asynchronous)) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "remember(): asynchronous must be an int");
    return NULL;
  }
  readable = read_call(args, (int)asynchronous, &table, &array, &key, &hash);
  if (readable <= 0) return readable < 0 ? NULL : Py_NewRef(Py_False);
  block = (char*)address_arg(args[11]);
  in_offset = PyLong_AsSsize_t(args[12]);
  out_offset = args[13] == Py_None ? -1 : PyLong_AsSsize_t(args[13]);
  if (PyErr_Occurred()) return NULL;
  if (block == NULL) {
    PyErr_SetString(PyExc_ValueError, "null argument block");
    return NULL;
  }
  /* An engine-allocated result comes back as a numpy array: not for torch.
   * submit_cached takes in-place blocks only. */
  if ((array.is_torch || asynchronous) && out_offset < 0) Py_RETURN_FALSE;
  if (asynchronous && !key.in_place) Py_RETURN_FALSE;
  for (i = 0; i < TABLE_PROBES && entry == NULL; ++i) {
    table_entry* candidate = &table->entries[(hash + i) & (TABLE_SIZE - 1)];
    if (candidate->owner == NULL || same_key(candidate, &key, &array, hash)) entry = candidate;
  }
  if (entry == NULL) entry = &table->entries[hash & (TABLE_SIZE - 1)];
  clear_entry(entry);
  entry->key = key;
  Py_INCREF(key.name);
  entry->owner = Py_NewRef(args[10]);
  entry->dtype = Py_NewRef(array.dtype);
  entry->is_torch = array.is_torch;
  entry->shape = PyTuple_New(array.nd);
  if (entry->shape == NULL) {
    clear_entry(entry);
    return NULL;
  }
  for (i = 0; i < array.nd; ++i) {
    PyObject* extent = PyLong_FromSsize_t(array.dims[i]);
    if (extent == NULL) {
      clear_entry(entry);
      return NULL;
    }
    PyTuple_SetItem(entry->shape, i, extent);
  }
  entry->block = block;
  entry->in_offset = in_offset;
  entry->out_offset = out_offset;
  entry->hash = hash;
  entry->nd = array.nd;
  memcpy(entry->dims, array.dims, sizeof(Py_ssize_t) * (size_t)array.nd);
  Py_RETURN_TRUE;
}

/* submit_cached(table, collective, tensor, in_place, name, op, root_rank,
 * prescale, postscale, process_set_id, asynchronous): run_cached's lookup for
 * an asynchronous in-place call, whose block remember() added with the same
 * `asynchronous` (1, or 2 for a block packed for a caller that waits at
 * once: the key tells such blocks apart). The tensor's address goes into
 * the block, which is enqueued without waiting. Returns the operation's
 * handle as an int; None, having done nothing, when the call is not in the
 * table; a 1-tuple holding the hvd_error* when the enqueue failed. A loop
 * of allreduce_async_ over a model's gradients spent more time finding
 * and filling each tensor's block through Python than the engine spent on
 * it. */
static PyObject* submit_cached(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  sync_table* table;
  plain_tensor array;
  call_key key;
  Py_uhash_t hash;
  table_entry* entry;
  long long asynchronous;
  void* handle = NULL;
  void* error;
  int readable;
  if (check_count(nargs, 11, "submit_cached") != 0) return NULL;
  if (!exact_int(args[10], &asynchronous) || asynchronous == 0) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "submit_cached(): asynchronous must be a non-zero int");
    return NULL;
  }
  readable = read_call(args, (int)asynchronous, &table, &array, &key, &hash);
  if (readable <= 0) return readable < 0 ? NULL : Py_NewRef(Py_None);
  entry = key.in_place ? find_entry(table, &key, &array, hash) : NULL;
  if (entry == NULL || entry->out_offset < 0 || enqueue == NULL) return Py_NewRef(Py_None);
  store_address(entry->block, entry->in_offset, array.data);
  store_address(entry->block, entry->out_offset, array.data);
  Py_BEGIN_ALLOW_THREADS
  error = enqueue(entry->block, &handle);
  Py_END_ALLOW_THREADS
  if (error != NULL) return Py_BuildValue("(N)", PyLong_FromVoidPtr(error));
  return PyLong_FromVoidPtr(handle);
}

/* wait(handle): hvd_handle_wait for one slice, without the GIL. None once
 * the operation finished without error; else the hvd_error* as an int (a
 * TIMEOUT error while it is still in flight). */
static PyObject* wait_slice(PyObject* self, PyObject* arg) {
  void* handle = PyLong_AsVoidPtr(arg);
  void* error;
  if (handle == NULL) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "wait() needs a handle");
    return NULL;
  }
  if (handle_wait == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "_hvd_fastcall is not bound to libhvd_core");
    return NULL;
  }
  Py_BEGIN_ALLOW_THREADS
  error = handle_wait(handle, wait_slice_seconds);
  Py_END_ALLOW_THREADS
  if (error == NULL) Py_RETURN_NONE;
  return PyLong_FromVoidPtr(error);
}

/* pending_output(table): see run_cached. */
static PyObject* pending_output(PyObject* self, PyObject* table) {
  if ((PyObject*)Py_TYPE(table) != sync_table_type) {
    PyErr_SetString(PyExc_TypeError, "pending_output() needs a sync_table");
    return NULL;
  }
  return Py_NewRef(((sync_table*)table)->pending_output ? ((sync_table*)table)->pending_output : Py_None);
}

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL, "Takes the engine's function addresses."},
    {"run", (PyCFunction)(void (*)(void))run, METH_FASTCALL, "Runs a packed collective on arrays or addresses."},
    {"run_owned", (PyCFunction)(void (*)(void))run_owned, METH_FASTCALL,
     "Runs a packed collective whose result the engine allocates."},
    {"bind_numpy", (PyCFunction)(void (*)(void))bind_numpy, METH_FASTCALL,
     "Checks numpy's array layout and takes numpy.empty."},
    {"bind_torch", (PyCFunction)(void (*)(void))bind_torch, METH_FASTCALL,
     "Takes torch.Tensor, torch.empty_like and torch.strided: torch tensors are then taken too."},
    {"sync_table", (PyCFunction)(void (*)(void))new_sync_table, METH_FASTCALL, "A thread's table of call blocks."},
    {"run_cached", (PyCFunction)(void (*)(void))run_cached, METH_FASTCALL, "Runs a call from a sync_table."},
    {"remember", (PyCFunction)(void (*)(void))remember, METH_FASTCALL, "Adds a call's block to a sync_table."},
    {"pending_output", pending_output, METH_O, "The result a failed or unfinished run_cached left."},
    {"submit_cached", (PyCFunction)(void (*)(void))submit_cached, METH_FASTCALL,
     "Enqueues an asynchronous in-place call from a sync_table; its handle."},
    {"wait", wait_slice, METH_O, "Waits one slice for a handle without the GIL."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_hvd_fastcall", "Optional C calls for horovod.common's synchronous collectives.", -1,
    methods, NULL, NULL, NULL, NULL,
};

static PyObject** const attribute_names[] = {&str_requires_grad, &str_is_cpu, &str_layout, &str_is_contiguous,
                                              &str_shape, &str_dtype, &str_data_ptr};
static const char* const attribute_texts[] = {"requires_grad", "is_cpu", "layout", "is_contiguous",
                                              "shape", "dtype", "data_ptr"};

PyMODINIT_FUNC PyInit__hvd_fastcall(void) {
  size_t i;
  for (i = 0; i < sizeof attribute_names / sizeof attribute_names[0]; ++i) {
    if (*attribute_names[i] == NULL) *attribute_names[i] = PyUnicode_InternFromString(attribute_texts[i]);
    if (*attribute_names[i] == NULL) return NULL;
  }
  if (sync_table_type == NULL) {
    sync_table_type = PyType_FromSpec(&sync_table_spec);
    if (sync_table_type == NULL) return NULL;
  }
  if (owned_memory_type == NULL) {
    owned_memory_type = PyType_FromSpec(&owned_memory_spec);
    if (owned_memory_type == NULL) return NULL;
  }
  return PyModule_Create(&module);
}
