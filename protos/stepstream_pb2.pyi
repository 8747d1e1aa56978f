from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DTYPE_UNSPECIFIED: _ClassVar[DType]
    FLOAT32: _ClassVar[DType]
    FLOAT64: _ClassVar[DType]
    FLOAT16: _ClassVar[DType]
    INT8: _ClassVar[DType]
    INT16: _ClassVar[DType]
    INT32: _ClassVar[DType]
    INT64: _ClassVar[DType]
    UINT8: _ClassVar[DType]
    UINT16: _ClassVar[DType]
    UINT32: _ClassVar[DType]
    UINT64: _ClassVar[DType]
    BOOL: _ClassVar[DType]
DTYPE_UNSPECIFIED: DType
FLOAT32: DType
FLOAT64: DType
FLOAT16: DType
INT8: DType
INT16: DType
INT32: DType
INT64: DType
UINT8: DType
UINT16: DType
UINT32: DType
UINT64: DType
BOOL: DType

class Tensor(_message.Message):
    __slots__ = ("dtype", "shape", "data", "png", "compressed_channel_mapping")
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    PNG_FIELD_NUMBER: _ClassVar[int]
    COMPRESSED_CHANNEL_MAPPING_FIELD_NUMBER: _ClassVar[int]
    dtype: DType
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    png: _containers.RepeatedScalarFieldContainer[bytes]
    compressed_channel_mapping: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, dtype: _Optional[_Union[DType, str]] = ..., shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ..., png: _Optional[_Iterable[bytes]] = ..., compressed_channel_mapping: _Optional[_Iterable[int]] = ...) -> None: ...

class ObservationSpec(_message.Message):
    __slots__ = ("shape", "dtype", "name")
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    shape: _containers.RepeatedScalarFieldContainer[int]
    dtype: DType
    name: str
    def __init__(self, shape: _Optional[_Iterable[int]] = ..., dtype: _Optional[_Union[DType, str]] = ..., name: _Optional[str] = ...) -> None: ...

class ActionSpec(_message.Message):
    __slots__ = ("continuous_size", "discrete_branches")
    CONTINUOUS_SIZE_FIELD_NUMBER: _ClassVar[int]
    DISCRETE_BRANCHES_FIELD_NUMBER: _ClassVar[int]
    continuous_size: int
    discrete_branches: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, continuous_size: _Optional[int] = ..., discrete_branches: _Optional[_Iterable[int]] = ...) -> None: ...

class BrainParameters(_message.Message):
    __slots__ = ("behavior_name", "observation_specs", "action_spec")
    BEHAVIOR_NAME_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_SPECS_FIELD_NUMBER: _ClassVar[int]
    ACTION_SPEC_FIELD_NUMBER: _ClassVar[int]
    behavior_name: str
    observation_specs: _containers.RepeatedCompositeFieldContainer[ObservationSpec]
    action_spec: ActionSpec
    def __init__(self, behavior_name: _Optional[str] = ..., observation_specs: _Optional[_Iterable[_Union[ObservationSpec, _Mapping]]] = ..., action_spec: _Optional[_Union[ActionSpec, _Mapping]] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("protocol_version", "client_id", "brain_parameters", "team_ids")
    class TeamIdsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    BRAIN_PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    TEAM_IDS_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    client_id: str
    brain_parameters: _containers.RepeatedCompositeFieldContainer[BrainParameters]
    team_ids: _containers.ScalarMap[str, int]
    def __init__(self, protocol_version: _Optional[int] = ..., client_id: _Optional[str] = ..., brain_parameters: _Optional[_Iterable[_Union[BrainParameters, _Mapping]]] = ..., team_ids: _Optional[_Mapping[str, int]] = ...) -> None: ...

class HelloReply(_message.Message):
    __slots__ = ("protocol_version", "session_id", "max_message_bytes")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    session_id: str
    max_message_bytes: int
    def __init__(self, protocol_version: _Optional[int] = ..., session_id: _Optional[str] = ..., max_message_bytes: _Optional[int] = ...) -> None: ...

class BrainInfo(_message.Message):
    __slots__ = ("behavior_name", "agent_ids", "observations", "rewards", "done", "max_reached", "action_mask", "environment_stats", "group_ids", "group_rewards")
    BEHAVIOR_NAME_FIELD_NUMBER: _ClassVar[int]
    AGENT_IDS_FIELD_NUMBER: _ClassVar[int]
    OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    REWARDS_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    MAX_REACHED_FIELD_NUMBER: _ClassVar[int]
    ACTION_MASK_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_STATS_FIELD_NUMBER: _ClassVar[int]
    GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    GROUP_REWARDS_FIELD_NUMBER: _ClassVar[int]
    behavior_name: str
    agent_ids: Tensor
    observations: _containers.RepeatedCompositeFieldContainer[Tensor]
    rewards: Tensor
    done: Tensor
    max_reached: Tensor
    action_mask: Tensor
    environment_stats: _containers.RepeatedCompositeFieldContainer[EnvironmentStat]
    group_ids: Tensor
    group_rewards: Tensor
    def __init__(self, behavior_name: _Optional[str] = ..., agent_ids: _Optional[_Union[Tensor, _Mapping]] = ..., observations: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ..., rewards: _Optional[_Union[Tensor, _Mapping]] = ..., done: _Optional[_Union[Tensor, _Mapping]] = ..., max_reached: _Optional[_Union[Tensor, _Mapping]] = ..., action_mask: _Optional[_Union[Tensor, _Mapping]] = ..., environment_stats: _Optional[_Iterable[_Union[EnvironmentStat, _Mapping]]] = ..., group_ids: _Optional[_Union[Tensor, _Mapping]] = ..., group_rewards: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...

class EnvironmentStat(_message.Message):
    __slots__ = ("key", "value", "aggregation")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    AGGREGATION_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: float
    aggregation: int
    def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ..., aggregation: _Optional[int] = ...) -> None: ...

class ActionInfo(_message.Message):
    __slots__ = ("behavior_name", "continuous_actions", "discrete_actions", "policy_version")
    BEHAVIOR_NAME_FIELD_NUMBER: _ClassVar[int]
    CONTINUOUS_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    DISCRETE_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    behavior_name: str
    continuous_actions: Tensor
    discrete_actions: Tensor
    policy_version: int
    def __init__(self, behavior_name: _Optional[str] = ..., continuous_actions: _Optional[_Union[Tensor, _Mapping]] = ..., discrete_actions: _Optional[_Union[Tensor, _Mapping]] = ..., policy_version: _Optional[int] = ...) -> None: ...

class StepRequest(_message.Message):
    __slots__ = ("hello", "brain_info")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    BRAIN_INFO_FIELD_NUMBER: _ClassVar[int]
    hello: Hello
    brain_info: BrainInfo
    def __init__(self, hello: _Optional[_Union[Hello, _Mapping]] = ..., brain_info: _Optional[_Union[BrainInfo, _Mapping]] = ...) -> None: ...

class StepResponse(_message.Message):
    __slots__ = ("hello_reply", "action_info", "environment_parameters")
    HELLO_REPLY_FIELD_NUMBER: _ClassVar[int]
    ACTION_INFO_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    hello_reply: HelloReply
    action_info: ActionInfo
    environment_parameters: EnvironmentParameters
    def __init__(self, hello_reply: _Optional[_Union[HelloReply, _Mapping]] = ..., action_info: _Optional[_Union[ActionInfo, _Mapping]] = ..., environment_parameters: _Optional[_Union[EnvironmentParameters, _Mapping]] = ...) -> None: ...

class EnvironmentParameters(_message.Message):
    __slots__ = ("samplers", "lessons", "reset")
    class SamplersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: EnvironmentSampler
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[EnvironmentSampler, _Mapping]] = ...) -> None: ...
    class LessonsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    SAMPLERS_FIELD_NUMBER: _ClassVar[int]
    LESSONS_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    samplers: _containers.MessageMap[str, EnvironmentSampler]
    lessons: _containers.ScalarMap[str, int]
    reset: bool
    def __init__(self, samplers: _Optional[_Mapping[str, EnvironmentSampler]] = ..., lessons: _Optional[_Mapping[str, int]] = ..., reset: _Optional[bool] = ...) -> None: ...

class EnvironmentSampler(_message.Message):
    __slots__ = ("type", "seed", "values")
    class Type(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        CONSTANT: _ClassVar[EnvironmentSampler.Type]
        UNIFORM: _ClassVar[EnvironmentSampler.Type]
        GAUSSIAN: _ClassVar[EnvironmentSampler.Type]
        MULTIRANGEUNIFORM: _ClassVar[EnvironmentSampler.Type]
    CONSTANT: EnvironmentSampler.Type
    UNIFORM: EnvironmentSampler.Type
    GAUSSIAN: EnvironmentSampler.Type
    MULTIRANGEUNIFORM: EnvironmentSampler.Type
    TYPE_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    type: EnvironmentSampler.Type
    seed: int
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, type: _Optional[_Union[EnvironmentSampler.Type, str]] = ..., seed: _Optional[int] = ..., values: _Optional[_Iterable[float]] = ...) -> None: ...

class TrajectoryId(_message.Message):
    __slots__ = ("session_id", "agent_id", "sequence")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    agent_id: int
    sequence: int
    def __init__(self, session_id: _Optional[str] = ..., agent_id: _Optional[int] = ..., sequence: _Optional[int] = ...) -> None: ...

class Trajectory(_message.Message):
    __slots__ = ("id", "behavior_name", "observations", "next_observations", "continuous_actions", "discrete_actions", "continuous_log_probs", "discrete_log_probs", "prev_continuous_actions", "prev_discrete_actions", "action_mask", "rewards", "done", "policy_versions", "done_reached", "interrupted", "episode_ended", "episode_reward", "episode_length", "environment_stats", "memories", "group_rewards", "groupmate_observations", "groupmate_continuous_actions", "groupmate_discrete_actions", "groupmate_rewards", "groupmate_status", "next_groupmate_observations")
    ID_FIELD_NUMBER: _ClassVar[int]
    BEHAVIOR_NAME_FIELD_NUMBER: _ClassVar[int]
    OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    CONTINUOUS_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    DISCRETE_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    CONTINUOUS_LOG_PROBS_FIELD_NUMBER: _ClassVar[int]
    DISCRETE_LOG_PROBS_FIELD_NUMBER: _ClassVar[int]
    PREV_CONTINUOUS_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    PREV_DISCRETE_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    ACTION_MASK_FIELD_NUMBER: _ClassVar[int]
    REWARDS_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    DONE_REACHED_FIELD_NUMBER: _ClassVar[int]
    INTERRUPTED_FIELD_NUMBER: _ClassVar[int]
    EPISODE_ENDED_FIELD_NUMBER: _ClassVar[int]
    EPISODE_REWARD_FIELD_NUMBER: _ClassVar[int]
    EPISODE_LENGTH_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_STATS_FIELD_NUMBER: _ClassVar[int]
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    GROUP_REWARDS_FIELD_NUMBER: _ClassVar[int]
    GROUPMATE_OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    GROUPMATE_CONTINUOUS_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    GROUPMATE_DISCRETE_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    GROUPMATE_REWARDS_FIELD_NUMBER: _ClassVar[int]
    GROUPMATE_STATUS_FIELD_NUMBER: _ClassVar[int]
    NEXT_GROUPMATE_OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    id: TrajectoryId
    behavior_name: str
    observations: _containers.RepeatedCompositeFieldContainer[Tensor]
    next_observations: _containers.RepeatedCompositeFieldContainer[Tensor]
    continuous_actions: Tensor
    discrete_actions: Tensor
    continuous_log_probs: Tensor
    discrete_log_probs: Tensor
    prev_continuous_actions: Tensor
    prev_discrete_actions: Tensor
    action_mask: Tensor
    rewards: Tensor
    done: Tensor
    policy_versions: Tensor
    done_reached: bool
    interrupted: bool
    episode_ended: bool
    episode_reward: float
    episode_length: int
    environment_stats: _containers.RepeatedCompositeFieldContainer[EnvironmentStat]
    memories: Tensor
    group_rewards: Tensor
    groupmate_observations: _containers.RepeatedCompositeFieldContainer[Tensor]
    groupmate_continuous_actions: Tensor
    groupmate_discrete_actions: Tensor
    groupmate_rewards: Tensor
    groupmate_status: Tensor
    next_groupmate_observations: _containers.RepeatedCompositeFieldContainer[Tensor]
    def __init__(self, id: _Optional[_Union[TrajectoryId, _Mapping]] = ..., behavior_name: _Optional[str] = ..., observations: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ..., next_observations: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ..., continuous_actions: _Optional[_Union[Tensor, _Mapping]] = ..., discrete_actions: _Optional[_Union[Tensor, _Mapping]] = ..., continuous_log_probs: _Optional[_Union[Tensor, _Mapping]] = ..., discrete_log_probs: _Optional[_Union[Tensor, _Mapping]] = ..., prev_continuous_actions: _Optional[_Union[Tensor, _Mapping]] = ..., prev_discrete_actions: _Optional[_Union[Tensor, _Mapping]] = ..., action_mask: _Optional[_Union[Tensor, _Mapping]] = ..., rewards: _Optional[_Union[Tensor, _Mapping]] = ..., done: _Optional[_Union[Tensor, _Mapping]] = ..., policy_versions: _Optional[_Union[Tensor, _Mapping]] = ..., done_reached: _Optional[bool] = ..., interrupted: _Optional[bool] = ..., episode_ended: _Optional[bool] = ..., episode_reward: _Optional[float] = ..., episode_length: _Optional[int] = ..., environment_stats: _Optional[_Iterable[_Union[EnvironmentStat, _Mapping]]] = ..., memories: _Optional[_Union[Tensor, _Mapping]] = ..., group_rewards: _Optional[_Union[Tensor, _Mapping]] = ..., groupmate_observations: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ..., groupmate_continuous_actions: _Optional[_Union[Tensor, _Mapping]] = ..., groupmate_discrete_actions: _Optional[_Union[Tensor, _Mapping]] = ..., groupmate_rewards: _Optional[_Union[Tensor, _Mapping]] = ..., groupmate_status: _Optional[_Union[Tensor, _Mapping]] = ..., next_groupmate_observations: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ...) -> None: ...

class NormalizerState(_message.Message):
    __slots__ = ("mean", "variance", "count")
    MEAN_FIELD_NUMBER: _ClassVar[int]
    VARIANCE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    mean: Tensor
    variance: Tensor
    count: int
    def __init__(self, mean: _Optional[_Union[Tensor, _Mapping]] = ..., variance: _Optional[_Union[Tensor, _Mapping]] = ..., count: _Optional[int] = ...) -> None: ...

class InferenceArtifact(_message.Message):
    __slots__ = ("format", "model", "normalizers", "tanh_squash", "clip", "action_spec", "memory_size")
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    NORMALIZERS_FIELD_NUMBER: _ClassVar[int]
    TANH_SQUASH_FIELD_NUMBER: _ClassVar[int]
    CLIP_FIELD_NUMBER: _ClassVar[int]
    ACTION_SPEC_FIELD_NUMBER: _ClassVar[int]
    MEMORY_SIZE_FIELD_NUMBER: _ClassVar[int]
    format: str
    model: bytes
    normalizers: _containers.RepeatedCompositeFieldContainer[NormalizerState]
    tanh_squash: bool
    clip: float
    action_spec: ActionSpec
    memory_size: int
    def __init__(self, format: _Optional[str] = ..., model: _Optional[bytes] = ..., normalizers: _Optional[_Iterable[_Union[NormalizerState, _Mapping]]] = ..., tanh_squash: _Optional[bool] = ..., clip: _Optional[float] = ..., action_spec: _Optional[_Union[ActionSpec, _Mapping]] = ..., memory_size: _Optional[int] = ...) -> None: ...

class PolicyUpdate(_message.Message):
    __slots__ = ("behavior_name", "version", "trainer_step", "artifact", "snapshot", "elo")
    BEHAVIOR_NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TRAINER_STEP_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    ELO_FIELD_NUMBER: _ClassVar[int]
    behavior_name: str
    version: int
    trainer_step: int
    artifact: InferenceArtifact
    snapshot: int
    elo: float
    def __init__(self, behavior_name: _Optional[str] = ..., version: _Optional[int] = ..., trainer_step: _Optional[int] = ..., artifact: _Optional[_Union[InferenceArtifact, _Mapping]] = ..., snapshot: _Optional[int] = ..., elo: _Optional[float] = ...) -> None: ...

class SubscribeOpen(_message.Message):
    __slots__ = ("behavior_name", "subscriber_name")
    BEHAVIOR_NAME_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBER_NAME_FIELD_NUMBER: _ClassVar[int]
    behavior_name: str
    subscriber_name: str
    def __init__(self, behavior_name: _Optional[str] = ..., subscriber_name: _Optional[str] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("delivery_tags",)
    DELIVERY_TAGS_FIELD_NUMBER: _ClassVar[int]
    delivery_tags: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, delivery_tags: _Optional[_Iterable[int]] = ...) -> None: ...

class SubscriberMessage(_message.Message):
    __slots__ = ("open", "ack")
    OPEN_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    open: SubscribeOpen
    ack: Ack
    def __init__(self, open: _Optional[_Union[SubscribeOpen, _Mapping]] = ..., ack: _Optional[_Union[Ack, _Mapping]] = ...) -> None: ...

class Delivery(_message.Message):
    __slots__ = ("delivery_tag", "trajectory")
    DELIVERY_TAG_FIELD_NUMBER: _ClassVar[int]
    TRAJECTORY_FIELD_NUMBER: _ClassVar[int]
    delivery_tag: int
    trajectory: Trajectory
    def __init__(self, delivery_tag: _Optional[int] = ..., trajectory: _Optional[_Union[Trajectory, _Mapping]] = ...) -> None: ...

class DeliveryBatch(_message.Message):
    __slots__ = ("deliveries",)
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    deliveries: _containers.RepeatedCompositeFieldContainer[Delivery]
    def __init__(self, deliveries: _Optional[_Iterable[_Union[Delivery, _Mapping]]] = ...) -> None: ...

class PublishPolicyReply(_message.Message):
    __slots__ = ("accepted", "current_version")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    CURRENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    current_version: int
    def __init__(self, accepted: _Optional[bool] = ..., current_version: _Optional[int] = ...) -> None: ...

class PolicyQuery(_message.Message):
    __slots__ = ("behavior_name",)
    BEHAVIOR_NAME_FIELD_NUMBER: _ClassVar[int]
    behavior_name: str
    def __init__(self, behavior_name: _Optional[str] = ...) -> None: ...

class PolicyStatus(_message.Message):
    __slots__ = ("behavior_name", "highest_version", "brain_parameters", "training_finished")
    BEHAVIOR_NAME_FIELD_NUMBER: _ClassVar[int]
    HIGHEST_VERSION_FIELD_NUMBER: _ClassVar[int]
    BRAIN_PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    TRAINING_FINISHED_FIELD_NUMBER: _ClassVar[int]
    behavior_name: str
    highest_version: int
    brain_parameters: BrainParameters
    training_finished: bool
    def __init__(self, behavior_name: _Optional[str] = ..., highest_version: _Optional[int] = ..., brain_parameters: _Optional[_Union[BrainParameters, _Mapping]] = ..., training_finished: _Optional[bool] = ...) -> None: ...

class TrainingFinished(_message.Message):
    __slots__ = ("behavior_name", "trainer_step", "policy_version")
    BEHAVIOR_NAME_FIELD_NUMBER: _ClassVar[int]
    TRAINER_STEP_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    behavior_name: str
    trainer_step: int
    policy_version: int
    def __init__(self, behavior_name: _Optional[str] = ..., trainer_step: _Optional[int] = ..., policy_version: _Optional[int] = ...) -> None: ...
