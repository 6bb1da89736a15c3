#include "offload/uring_storage.h"

#include <algorithm>
#include <cerrno>
#include <utility>

#include "core/logging.h"
#include "core/posix_error.h"

namespace hoist::offload {

namespace {

// liburing returns -errno; this is the one place it becomes a Status.
Status UringError(const std::string& what, const std::string& path, int negative_errno) {
  return PosixError("offload: " + what, path, -negative_errno);
}

// Failures of the submission itself that go away once completions are reaped or the call is
// repeated.
bool Transient(int negative_errno) {
  return negative_errno == -EINTR || negative_errno == -EAGAIN || negative_errno == -EBUSY;
}

}  // namespace

StatusOr<std::unique_ptr<UringStorage>> UringStorage::Open(const std::string& path,
                                                           int64_t size_bytes,
                                                           const UringStorageOptions& options) {
  if (options.block_size_bytes <= 0 || options.queue_depth <= 0) {
    return InvalidArgumentError("offload: block size (" + std::to_string(options.block_size_bytes) +
                                ") and queue depth (" + std::to_string(options.queue_depth) +
                                ") for " + path + " must be positive");
  }
  HOIST_ASSIGN_OR_RETURN(ScratchFile file, ScratchFile::Open(path, size_bytes, options.file));
  if (options.block_size_bytes % file.alignment() != 0) {
    return InvalidArgumentError("offload: block size " + std::to_string(options.block_size_bytes) +
                                " for " + path + " is not a multiple of " +
                                std::to_string(file.alignment()) + " (O_DIRECT)");
  }
  std::unique_ptr<UringStorage> storage(
      new UringStorage(std::move(file), options.block_size_bytes, options.queue_depth));
  const int rc =
      io_uring_queue_init(static_cast<unsigned>(options.queue_depth), &storage->ring_, 0);
  if (rc < 0) return UringError("io_uring_queue_init", path, rc);
  storage->ring_ready_ = true;
  return storage;
}

UringStorage::UringStorage(ScratchFile file, int64_t block_size_bytes, int queue_depth)
    : file_(std::move(file)),
      block_size_bytes_(block_size_bytes),
      queue_depth_(queue_depth),
      slots_(static_cast<size_t>(queue_depth)) {
  for (int i = queue_depth - 1; i >= 0; --i) free_slots_.push_back(i);
}

UringStorage::~UringStorage() {
  if (!ring_ready_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A batch that was never waited for still has buffers the kernel writes into.
    if (broken_.ok() && !BatchDone()) {
      Status ignored = Drive(nullptr);
      if (!ignored.ok()) {
        HOIST_LOG(WARN) << "offload: a batch on " << path()
                        << " was never waited for and failed: " << ignored.ToString();
      }
    }
  }
  io_uring_queue_exit(&ring_);
}

void UringStorage::Enqueue(Transfer* transfer) {
  const IoRequest& r = transfer->request;
  auto* data = static_cast<char*>(r.data);
  for (int64_t done = 0; done < r.bytes; done += block_size_bytes_) {
    const int64_t n = std::min(block_size_bytes_, r.bytes - done);
    queued_.push_back(Piece{transfer, r.offset + done, data + done, n, 0});
    ++transfer->pieces_left;
  }
}

void UringStorage::FinishPiece(Piece& piece) {
  Transfer* transfer = piece.transfer;
  --transfer->pieces_left;
  if (transfer->in_batch) --batch_pieces_left_;
  piece.transfer = nullptr;
}

void UringStorage::Pump() {
  while (!queued_.empty()) {
    // Pieces of a transfer that already failed still run, so that everything before the
    // reported failure point is known to have moved (as TransferFully's "after N bytes" means).
    Piece& front = queued_.front();
    if (free_slots_.empty()) break;
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) break;
    const int slot = free_slots_.back();
    free_slots_.pop_back();
    slots_[static_cast<size_t>(slot)] = front;
    queued_.pop_front();
    const Piece& p = slots_[static_cast<size_t>(slot)];
    const auto n = static_cast<unsigned>(p.bytes - p.done_bytes);
    const auto offset = static_cast<__u64>(p.offset + p.done_bytes);
    if (p.transfer->request.op == IoOp::kRead) {
      io_uring_prep_read(sqe, file_.fd(), p.data + p.done_bytes, n, offset);
    } else {
      io_uring_prep_write(sqe, file_.fd(), p.data + p.done_bytes, n, offset);
    }
    io_uring_sqe_set_data64(sqe, static_cast<__u64>(slot));
    ++prepared_;
  }
  if (prepared_ == 0) return;
  const int rc = io_uring_submit(&ring_);
  if (rc >= 0) {
    prepared_ -= rc;
    in_kernel_ += rc;
  } else if (!Transient(rc)) {
    broken_ = UringError("io_uring_submit", path(), rc);
  }
}

void UringStorage::Complete(int slot, int res) {
  Piece& p = slots_[static_cast<size_t>(slot)];
  Transfer& t = *p.transfer;
  const IoRequest& r = t.request;
  // Where in the request it stopped, for "failed after N bytes".
  const int64_t reached = p.offset + p.done_bytes - r.offset;
  // Of several failing pieces the one nearest the start is reported; pieces complete in any
  // order, and this keeps the message the same from run to run.
  const bool first_failure = t.status.ok() || reached < t.failed_after_bytes;
  bool finished = true;
  if (res == -EINTR || res == -EAGAIN) {
    finished = false;
  } else if (res < 0) {
    if (first_failure) {
      t.status = IoFailure(r.op, path(), r.offset, r.bytes, -res, reached);
      t.failed_after_bytes = reached;
    }
  } else if (res == 0) {
    if (first_failure) {
      // A write that moves nothing means the device will take no more, as in TransferFully.
      t.status = r.op == IoOp::kWrite ? IoFailure(r.op, path(), r.offset, r.bytes, ENOSPC, reached)
                                      : UnexpectedEof(path(), r.offset, r.bytes, reached);
      t.failed_after_bytes = reached;
    }
  } else {
    p.done_bytes += res;
    finished = p.done_bytes >= p.bytes;
  }
  if (finished) {
    FinishPiece(p);
  } else {
    // The remainder goes first, so that a short completion does not starve behind new work.
    queued_.push_front(p);
  }
  free_slots_.push_back(slot);
}

Status UringStorage::Drive(const Transfer* transfer) {
  auto done = [&] { return transfer != nullptr ? transfer->pieces_left == 0 : BatchDone(); };
  while (!done()) {
    HOIST_RETURN_IF_ERROR(broken_);
    Pump();
    HOIST_RETURN_IF_ERROR(broken_);
    if (in_kernel_ == 0) continue;  // only dropped pieces, or a transient refusal to retry
    io_uring_cqe* cqe = nullptr;
    int rc = io_uring_wait_cqe(&ring_, &cqe);
    if (rc == -EINTR) continue;
    if (rc < 0) {
      broken_ = UringError("io_uring_wait_cqe", path(), rc);
      return broken_;
    }
    unsigned head;
    unsigned seen = 0;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      Complete(static_cast<int>(io_uring_cqe_get_data64(cqe)), cqe->res);
      ++seen;
    }
    io_uring_cq_advance(&ring_, seen);
    in_kernel_ -= static_cast<int>(seen);
  }
  return Status::Ok();
}

Status UringStorage::Submit(std::span<const IoRequest> requests) {
  for (const IoRequest& r : requests) {
    HOIST_RETURN_IF_ERROR(CheckRequest(r.op, r.offset, r.data, r.bytes));
  }
  std::lock_guard<std::mutex> lock(mu_);
  HOIST_RETURN_IF_ERROR(broken_);
  for (const IoRequest& r : requests) {
    batch_.push_back(std::make_unique<Transfer>());
    batch_.back()->request = r;
    batch_.back()->in_batch = true;
    const int64_t queued_before = static_cast<int64_t>(queued_.size());
    Enqueue(batch_.back().get());
    batch_pieces_left_ += static_cast<int64_t>(queued_.size()) - queued_before;
  }
  // Starts the first queue_depth pieces now; Wait keeps the queue full.
  Pump();
  return Status::Ok();
}

Status UringStorage::Wait() {
  std::lock_guard<std::mutex> lock(mu_);
  HOIST_RETURN_IF_ERROR(Drive(nullptr));
  Status first;
  for (const auto& t : batch_) {
    if (!t->status.ok()) {
      first = t->status;
      break;
    }
  }
  batch_.clear();
  return first;
}

Status UringStorage::Write(int64_t offset, const void* data, int64_t bytes) {
  HOIST_RETURN_IF_ERROR(CheckRequest(IoOp::kWrite, offset, data, bytes));
  Transfer transfer;
  transfer.request = IoRequest{IoOp::kWrite, offset, const_cast<void*>(data), bytes};
  std::lock_guard<std::mutex> lock(mu_);
  HOIST_RETURN_IF_ERROR(broken_);
  Enqueue(&transfer);
  HOIST_RETURN_IF_ERROR(Drive(&transfer));
  return transfer.status;
}

Status UringStorage::Read(int64_t offset, void* data, int64_t bytes) {
  HOIST_RETURN_IF_ERROR(CheckRequest(IoOp::kRead, offset, data, bytes));
  Transfer transfer;
  transfer.request = IoRequest{IoOp::kRead, offset, data, bytes};
  std::lock_guard<std::mutex> lock(mu_);
  HOIST_RETURN_IF_ERROR(broken_);
  Enqueue(&transfer);
  HOIST_RETURN_IF_ERROR(Drive(&transfer));
  return transfer.status;
}

}  // namespace hoist::offload
