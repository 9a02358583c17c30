// File: trainer/run_identity.h
//
// The checkpoint identity (checkpoint/envelope.h) a run of a model config
// requires: the config's five identity strings (SPEC §6), the P/M/V payload
// size (3 planes × 4 bytes × NumParameters), the chunk size (4 MiB, SPEC §1)
// and the run's steps. `train` publishes and accepts exactly this identity;
// `inspect` checks checkpoints against it.
#ifndef COPPELIUS_TRAINER_RUN_IDENTITY_H_
#define COPPELIUS_TRAINER_RUN_IDENTITY_H_

#include "checkpoint/envelope.h"
#include "trainer/model_config.h"

namespace coppelius {

CheckpointIdentity RunCheckpointIdentity(const ModelConfig& config);

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_RUN_IDENTITY_H_
