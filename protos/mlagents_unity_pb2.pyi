from protos import mlagents_demo_pb2 as _mlagents_demo_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CommandProto(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STEP: _ClassVar[CommandProto]
    RESET: _ClassVar[CommandProto]
    QUIT: _ClassVar[CommandProto]
STEP: CommandProto
RESET: CommandProto
QUIT: CommandProto

class HeaderProto(_message.Message):
    __slots__ = ("status", "message")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    status: int
    message: str
    def __init__(self, status: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class UnityRLCapabilitiesProto(_message.Message):
    __slots__ = ("baseRLCapabilities", "concatenatedPngObservations", "compressedChannelMapping", "hybridActions", "trainingAnalytics", "variableLengthObservation", "multiAgentGroups")
    BASERLCAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    CONCATENATEDPNGOBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    COMPRESSEDCHANNELMAPPING_FIELD_NUMBER: _ClassVar[int]
    HYBRIDACTIONS_FIELD_NUMBER: _ClassVar[int]
    TRAININGANALYTICS_FIELD_NUMBER: _ClassVar[int]
    VARIABLELENGTHOBSERVATION_FIELD_NUMBER: _ClassVar[int]
    MULTIAGENTGROUPS_FIELD_NUMBER: _ClassVar[int]
    baseRLCapabilities: bool
    concatenatedPngObservations: bool
    compressedChannelMapping: bool
    hybridActions: bool
    trainingAnalytics: bool
    variableLengthObservation: bool
    multiAgentGroups: bool
    def __init__(self, baseRLCapabilities: _Optional[bool] = ..., concatenatedPngObservations: _Optional[bool] = ..., compressedChannelMapping: _Optional[bool] = ..., hybridActions: _Optional[bool] = ..., trainingAnalytics: _Optional[bool] = ..., variableLengthObservation: _Optional[bool] = ..., multiAgentGroups: _Optional[bool] = ...) -> None: ...

class UnityMessageProto(_message.Message):
    __slots__ = ("header", "unity_output", "unity_input")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    UNITY_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    UNITY_INPUT_FIELD_NUMBER: _ClassVar[int]
    header: HeaderProto
    unity_output: UnityOutputProto
    unity_input: UnityInputProto
    def __init__(self, header: _Optional[_Union[HeaderProto, _Mapping]] = ..., unity_output: _Optional[_Union[UnityOutputProto, _Mapping]] = ..., unity_input: _Optional[_Union[UnityInputProto, _Mapping]] = ...) -> None: ...

class UnityRLInitializationOutputProto(_message.Message):
    __slots__ = ("name", "communication_version", "log_path", "brain_parameters", "package_version", "capabilities")
    NAME_FIELD_NUMBER: _ClassVar[int]
    COMMUNICATION_VERSION_FIELD_NUMBER: _ClassVar[int]
    LOG_PATH_FIELD_NUMBER: _ClassVar[int]
    BRAIN_PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    PACKAGE_VERSION_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    name: str
    communication_version: str
    log_path: str
    brain_parameters: _containers.RepeatedCompositeFieldContainer[_mlagents_demo_pb2.BrainParametersProto]
    package_version: str
    capabilities: UnityRLCapabilitiesProto
    def __init__(self, name: _Optional[str] = ..., communication_version: _Optional[str] = ..., log_path: _Optional[str] = ..., brain_parameters: _Optional[_Iterable[_Union[_mlagents_demo_pb2.BrainParametersProto, _Mapping]]] = ..., package_version: _Optional[str] = ..., capabilities: _Optional[_Union[UnityRLCapabilitiesProto, _Mapping]] = ...) -> None: ...

class UnityRLOutputProto(_message.Message):
    __slots__ = ("agentInfos", "side_channel")
    class ListAgentInfoProto(_message.Message):
        __slots__ = ("value",)
        VALUE_FIELD_NUMBER: _ClassVar[int]
        value: _containers.RepeatedCompositeFieldContainer[_mlagents_demo_pb2.AgentInfoProto]
        def __init__(self, value: _Optional[_Iterable[_Union[_mlagents_demo_pb2.AgentInfoProto, _Mapping]]] = ...) -> None: ...
    class AgentInfosEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: UnityRLOutputProto.ListAgentInfoProto
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[UnityRLOutputProto.ListAgentInfoProto, _Mapping]] = ...) -> None: ...
    AGENTINFOS_FIELD_NUMBER: _ClassVar[int]
    SIDE_CHANNEL_FIELD_NUMBER: _ClassVar[int]
    agentInfos: _containers.MessageMap[str, UnityRLOutputProto.ListAgentInfoProto]
    side_channel: bytes
    def __init__(self, agentInfos: _Optional[_Mapping[str, UnityRLOutputProto.ListAgentInfoProto]] = ..., side_channel: _Optional[bytes] = ...) -> None: ...

class UnityOutputProto(_message.Message):
    __slots__ = ("rl_output", "rl_initialization_output")
    RL_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    RL_INITIALIZATION_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    rl_output: UnityRLOutputProto
    rl_initialization_output: UnityRLInitializationOutputProto
    def __init__(self, rl_output: _Optional[_Union[UnityRLOutputProto, _Mapping]] = ..., rl_initialization_output: _Optional[_Union[UnityRLInitializationOutputProto, _Mapping]] = ...) -> None: ...

class UnityRLInitializationInputProto(_message.Message):
    __slots__ = ("seed", "communication_version", "package_version", "capabilities", "num_areas")
    SEED_FIELD_NUMBER: _ClassVar[int]
    COMMUNICATION_VERSION_FIELD_NUMBER: _ClassVar[int]
    PACKAGE_VERSION_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    NUM_AREAS_FIELD_NUMBER: _ClassVar[int]
    seed: int
    communication_version: str
    package_version: str
    capabilities: UnityRLCapabilitiesProto
    num_areas: int
    def __init__(self, seed: _Optional[int] = ..., communication_version: _Optional[str] = ..., package_version: _Optional[str] = ..., capabilities: _Optional[_Union[UnityRLCapabilitiesProto, _Mapping]] = ..., num_areas: _Optional[int] = ...) -> None: ...

class UnityRLInputProto(_message.Message):
    __slots__ = ("agent_actions", "command", "side_channel")
    class ListAgentActionProto(_message.Message):
        __slots__ = ("value",)
        VALUE_FIELD_NUMBER: _ClassVar[int]
        value: _containers.RepeatedCompositeFieldContainer[_mlagents_demo_pb2.AgentActionProto]
        def __init__(self, value: _Optional[_Iterable[_Union[_mlagents_demo_pb2.AgentActionProto, _Mapping]]] = ...) -> None: ...
    class AgentActionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: UnityRLInputProto.ListAgentActionProto
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[UnityRLInputProto.ListAgentActionProto, _Mapping]] = ...) -> None: ...
    AGENT_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    SIDE_CHANNEL_FIELD_NUMBER: _ClassVar[int]
    agent_actions: _containers.MessageMap[str, UnityRLInputProto.ListAgentActionProto]
    command: CommandProto
    side_channel: bytes
    def __init__(self, agent_actions: _Optional[_Mapping[str, UnityRLInputProto.ListAgentActionProto]] = ..., command: _Optional[_Union[CommandProto, str]] = ..., side_channel: _Optional[bytes] = ...) -> None: ...

class UnityInputProto(_message.Message):
    __slots__ = ("rl_input", "rl_initialization_input")
    RL_INPUT_FIELD_NUMBER: _ClassVar[int]
    RL_INITIALIZATION_INPUT_FIELD_NUMBER: _ClassVar[int]
    rl_input: UnityRLInputProto
    rl_initialization_input: UnityRLInitializationInputProto
    def __init__(self, rl_input: _Optional[_Union[UnityRLInputProto, _Mapping]] = ..., rl_initialization_input: _Optional[_Union[UnityRLInitializationInputProto, _Mapping]] = ...) -> None: ...
