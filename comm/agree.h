// Agreeing on failure: a step that one rank cannot finish (an I/O error on its offload file, a
// refusal of its host's memory) must stop every rank at the same point, each with the reason,
// rather than leave the others waiting in the next collective until it times out.
#pragma once

#include <string>

#include "comm/communicator.h"
#include "core/status.h"

namespace hoist::comm {

// Collective: every rank passes its own outcome. When all are Ok, returns Ok (one small
// all-reduce). Otherwise a failing rank returns its own Status and every other rank returns
// kUnavailable "rank R failed: <R's status>", R being the lowest failing rank; messages longer
// than 500 bytes are cut. A failure of the collectives themselves is returned as it is.
Status AgreeOnStatus(Communicator& comm, const Status& local);

}  // namespace hoist::comm
