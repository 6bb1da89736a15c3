// How the ranks of a communicator spread over machines: every rank hashes its host name and all
// compare, through one all-gather (a collective: every rank of `comm` must call it).
#pragma once

#include <string>

#include "comm/communicator.h"
#include "core/status.h"

namespace hoist::comm {

struct NodeCounts {
  int on_this_node = 1;    // ranks on the caller's machine, the caller included
  int most_on_a_node = 1;  // ranks on the fullest machine (the same on every rank)
};

StatusOr<NodeCounts> CountRanksPerNode(Communicator& comm);

// Collective: the ranks on the caller's machine (the caller included) whose CPU affinity masks
// overlap the caller's, that is the ranks its cores are shared with. Ranks that mpirun or srun
// bound to cores of their own count only themselves.
StatusOr<int> CountRanksSharingCpus(Communicator& comm);

// Collective: refuses a resource that two ranks would both use. Each rank passes what it means to
// use, named so that equal names mean the same thing (for a GPU: the host name and the GPU's PCI
// bus id), or "" where it uses nothing; names are compared on their first 255 bytes. Returns
// kUnavailable on every rank that shares its name with another, naming the lowest such other
// rank and `what`; Ok elsewhere (callers agree on the outcome afterwards). A failure of the
// all-gather is returned as it is.
Status RefuseSharedResource(Communicator& comm, const std::string& mine, const std::string& what);

}  // namespace hoist::comm
