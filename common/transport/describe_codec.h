// WorkerDescription <-> moesplit.v1.DescribeResponse, and the shared
// ExpertClient helpers.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "common/transport/expert_transport.h"
#include "moesplit/v1/expert.pb.h"

namespace moesplit::transport {

void ToProto(const WorkerDescription& d, moesplit::v1::DescribeResponse* out);
WorkerDescription FromProto(const moesplit::v1::DescribeResponse& p);

// FAILED_PRECONDITION naming both identities when a worker serves another
// model than `expected` (empty `expected` accepts any).
absl::Status CheckIdentity(const std::string& address, const WorkerDescription& worker,
                           const std::string& expected);
// FAILED_PRECONDITION when the worker computes another expert FFN than
// `expected` (model::ExpertFfnName; empty `expected` accepts any).
absl::Status CheckExpertFfn(const std::string& address, const WorkerDescription& worker,
                            const std::string& expected);

}  // namespace moesplit::transport
