// How the ranks of a communicator spread over machines: every rank hashes its host name and all
// compare, through one all-gather (a collective: every rank of `comm` must call it).
#pragma once

#include "comm/communicator.h"
#include "core/status.h"

namespace hoist::comm {

struct NodeCounts {
  int on_this_node = 1;    // ranks on the caller's machine, the caller included
  int most_on_a_node = 1;  // ranks on the fullest machine (the same on every rank)
};

StatusOr<NodeCounts> CountRanksPerNode(Communicator& comm);

}  // namespace hoist::comm
