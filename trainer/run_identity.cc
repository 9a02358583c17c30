#include "trainer/run_identity.h"

namespace coppelius {

CheckpointIdentity RunCheckpointIdentity(const ModelConfig& config) {
  CheckpointIdentity id;
  id.state = config.identities.state;
  id.learner = config.identities.learner;
  id.data = config.identities.data;
  id.initialization = config.identities.initialization;
  id.model = config.identities.model;
  id.payload_bytes = static_cast<uint64_t>(kPlaneCount) * kBytesPerScalar *
                     static_cast<uint64_t>(NumParameters(config));
  id.chunk_bytes = kCoppeliusChunkBytes;
  id.run_steps = static_cast<uint64_t>(config.run_steps);
  return id;
}

}  // namespace coppelius
