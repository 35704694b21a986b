// xla_custom_calls.h - the custom-call targets through which Horovod ops
// run inside XLA programs: the tf2xla kernels (xla_tf2xla_kernels.cc) emit
// calls to them at compile time and the FFI handlers (xla_ffi_handlers.cc)
// serve them at run time, so both files take the names from here.
//
// Every call carries its attributes as an MLIR dictionary in backend_config:
// op_type (the TF op, for messages), name (the engine's tensor name) and
// process_set_id, plus per target reduce_op/prescale_factor/postscale_factor
// (allreduce, reducescatter), root_rank (broadcast), splits/received_splits
// (alltoall).
#ifndef HVD_TENSORFLOW_XLA_CUSTOM_CALLS_H_
#define HVD_TENSORFLOW_XLA_CUSTOM_CALLS_H_

namespace hvd_tf {

inline constexpr char kAllreduceTarget[] = "hvd_allreduce";
inline constexpr char kReducescatterTarget[] = "hvd_reducescatter";
inline constexpr char kAllgatherTarget[] = "hvd_allgather";
inline constexpr char kBroadcastTarget[] = "hvd_broadcast";
inline constexpr char kAlltoallTarget[] = "hvd_alltoall";
inline constexpr char kJoinTarget[] = "hvd_join";

}  // namespace hvd_tf

#endif  // HVD_TENSORFLOW_XLA_CUSTOM_CALLS_H_
