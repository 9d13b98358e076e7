from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SessionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SESSION_STATE_UNSPECIFIED: _ClassVar[SessionState]
    SESSION_STATE_STARTING: _ClassVar[SessionState]
    SESSION_STATE_RUNNING: _ClassVar[SessionState]
    SESSION_STATE_BROKEN: _ClassVar[SessionState]
    SESSION_STATE_CLOSED: _ClassVar[SessionState]
SESSION_STATE_UNSPECIFIED: SessionState
SESSION_STATE_STARTING: SessionState
SESSION_STATE_RUNNING: SessionState
SESSION_STATE_BROKEN: SessionState
SESSION_STATE_CLOSED: SessionState

class ResourceLimits(_message.Message):
    __slots__ = ("memory_bytes", "cpus", "pids", "scratchpad_bytes")
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    PIDS_FIELD_NUMBER: _ClassVar[int]
    SCRATCHPAD_BYTES_FIELD_NUMBER: _ClassVar[int]
    memory_bytes: int
    cpus: float
    pids: int
    scratchpad_bytes: int
    def __init__(self, memory_bytes: _Optional[int] = ..., cpus: _Optional[float] = ..., pids: _Optional[int] = ..., scratchpad_bytes: _Optional[int] = ...) -> None: ...

class ToolOverride(_message.Message):
    __slots__ = ("timeout_ms", "max_output_length", "disabled")
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    DISABLED_FIELD_NUMBER: _ClassVar[int]
    timeout_ms: int
    max_output_length: int
    disabled: bool
    def __init__(self, timeout_ms: _Optional[int] = ..., max_output_length: _Optional[int] = ..., disabled: _Optional[bool] = ...) -> None: ...

class CreateSessionRequest(_message.Message):
    __slots__ = ("image", "env", "labels", "limits", "network", "isolation", "idle_ttl_seconds", "tools", "env_defaults", "disable_secret_masking")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class ToolsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ToolOverride
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ToolOverride, _Mapping]] = ...) -> None: ...
    class EnvDefaultsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_FIELD_NUMBER: _ClassVar[int]
    IDLE_TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    ENV_DEFAULTS_FIELD_NUMBER: _ClassVar[int]
    DISABLE_SECRET_MASKING_FIELD_NUMBER: _ClassVar[int]
    image: str
    env: _containers.ScalarMap[str, str]
    labels: _containers.ScalarMap[str, str]
    limits: ResourceLimits
    network: str
    isolation: str
    idle_ttl_seconds: int
    tools: _containers.MessageMap[str, ToolOverride]
    env_defaults: _containers.ScalarMap[str, str]
    disable_secret_masking: bool
    def __init__(self, image: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., labels: _Optional[_Mapping[str, str]] = ..., limits: _Optional[_Union[ResourceLimits, _Mapping]] = ..., network: _Optional[str] = ..., isolation: _Optional[str] = ..., idle_ttl_seconds: _Optional[int] = ..., tools: _Optional[_Mapping[str, ToolOverride]] = ..., env_defaults: _Optional[_Mapping[str, str]] = ..., disable_secret_masking: _Optional[bool] = ...) -> None: ...

class Session(_message.Message):
    __slots__ = ("session_id", "state", "image", "container_id", "workspace", "scratchpad", "labels", "network", "isolation", "limits", "created_at", "last_used_at", "idle_ttl_seconds", "vault_keys", "env_defaults", "tools", "detail", "backend", "running_calls", "command_sessions")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class EnvDefaultsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class ToolsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ToolOverride
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ToolOverride, _Mapping]] = ...) -> None: ...
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    SCRATCHPAD_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_USED_AT_FIELD_NUMBER: _ClassVar[int]
    IDLE_TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    VAULT_KEYS_FIELD_NUMBER: _ClassVar[int]
    ENV_DEFAULTS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    RUNNING_CALLS_FIELD_NUMBER: _ClassVar[int]
    COMMAND_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    state: SessionState
    image: str
    container_id: str
    workspace: str
    scratchpad: str
    labels: _containers.ScalarMap[str, str]
    network: str
    isolation: str
    limits: ResourceLimits
    created_at: str
    last_used_at: str
    idle_ttl_seconds: int
    vault_keys: _containers.RepeatedScalarFieldContainer[str]
    env_defaults: _containers.ScalarMap[str, str]
    tools: _containers.MessageMap[str, ToolOverride]
    detail: str
    backend: str
    running_calls: int
    command_sessions: int
    def __init__(self, session_id: _Optional[str] = ..., state: _Optional[_Union[SessionState, str]] = ..., image: _Optional[str] = ..., container_id: _Optional[str] = ..., workspace: _Optional[str] = ..., scratchpad: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., network: _Optional[str] = ..., isolation: _Optional[str] = ..., limits: _Optional[_Union[ResourceLimits, _Mapping]] = ..., created_at: _Optional[str] = ..., last_used_at: _Optional[str] = ..., idle_ttl_seconds: _Optional[int] = ..., vault_keys: _Optional[_Iterable[str]] = ..., env_defaults: _Optional[_Mapping[str, str]] = ..., tools: _Optional[_Mapping[str, ToolOverride]] = ..., detail: _Optional[str] = ..., backend: _Optional[str] = ..., running_calls: _Optional[int] = ..., command_sessions: _Optional[int] = ...) -> None: ...

class GetSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class ListSessionsRequest(_message.Message):
    __slots__ = ("labels",)
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    LABELS_FIELD_NUMBER: _ClassVar[int]
    labels: _containers.ScalarMap[str, str]
    def __init__(self, labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ListSessionsResponse(_message.Message):
    __slots__ = ("sessions",)
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[Session]
    def __init__(self, sessions: _Optional[_Iterable[_Union[Session, _Mapping]]] = ...) -> None: ...

class CloseSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class CloseSessionResponse(_message.Message):
    __slots__ = ("closed",)
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    closed: bool
    def __init__(self, closed: _Optional[bool] = ...) -> None: ...

class ToolDefinition(_message.Message):
    __slots__ = ("name", "description", "parameters", "permission")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    parameters: str
    permission: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., parameters: _Optional[str] = ..., permission: _Optional[str] = ...) -> None: ...

class ListToolsRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class ListToolsResponse(_message.Message):
    __slots__ = ("tools",)
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[ToolDefinition]
    def __init__(self, tools: _Optional[_Iterable[_Union[ToolDefinition, _Mapping]]] = ...) -> None: ...

class ToolPermissionRequest(_message.Message):
    __slots__ = ("session_id", "name")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    name: str
    def __init__(self, session_id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class ToolPermissionResponse(_message.Message):
    __slots__ = ("permission",)
    PERMISSION_FIELD_NUMBER: _ClassVar[int]
    permission: str
    def __init__(self, permission: _Optional[str] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ("name", "arguments", "tool_call_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    arguments: str
    tool_call_id: str
    def __init__(self, name: _Optional[str] = ..., arguments: _Optional[str] = ..., tool_call_id: _Optional[str] = ...) -> None: ...

class ExecuteToolRequest(_message.Message):
    __slots__ = ("session_id", "tool_call")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    tool_call: ToolCall
    def __init__(self, session_id: _Optional[str] = ..., tool_call: _Optional[_Union[ToolCall, _Mapping]] = ...) -> None: ...

class CancelToolRequest(_message.Message):
    __slots__ = ("session_id", "tool_call_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    tool_call_id: str
    def __init__(self, session_id: _Optional[str] = ..., tool_call_id: _Optional[str] = ...) -> None: ...

class CancelToolResponse(_message.Message):
    __slots__ = ("cancelled",)
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    cancelled: bool
    def __init__(self, cancelled: _Optional[bool] = ...) -> None: ...

class OmniMessage(_message.Message):
    __slots__ = ("timestamp", "type", "origin", "partial_tool_call_output", "tool_call_output", "json")
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_TOOL_CALL_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    timestamp: str
    type: str
    origin: _containers.RepeatedScalarFieldContainer[str]
    partial_tool_call_output: PartialToolCallOutput
    tool_call_output: ToolCallOutput
    json: str
    def __init__(self, timestamp: _Optional[str] = ..., type: _Optional[str] = ..., origin: _Optional[_Iterable[str]] = ..., partial_tool_call_output: _Optional[_Union[PartialToolCallOutput, _Mapping]] = ..., tool_call_output: _Optional[_Union[ToolCallOutput, _Mapping]] = ..., json: _Optional[str] = ...) -> None: ...

class PartialToolCallOutput(_message.Message):
    __slots__ = ("role", "event_type", "output", "images", "tool_call_id", "stop_reason")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    role: str
    event_type: str
    output: str
    images: _containers.RepeatedScalarFieldContainer[str]
    tool_call_id: str
    stop_reason: str
    def __init__(self, role: _Optional[str] = ..., event_type: _Optional[str] = ..., output: _Optional[str] = ..., images: _Optional[_Iterable[str]] = ..., tool_call_id: _Optional[str] = ..., stop_reason: _Optional[str] = ...) -> None: ...

class ToolCallOutput(_message.Message):
    __slots__ = ("role", "output", "images", "tool_call_id", "stop_reason")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    role: str
    output: str
    images: _containers.RepeatedScalarFieldContainer[str]
    tool_call_id: str
    stop_reason: str
    def __init__(self, role: _Optional[str] = ..., output: _Optional[str] = ..., images: _Optional[_Iterable[str]] = ..., tool_call_id: _Optional[str] = ..., stop_reason: _Optional[str] = ...) -> None: ...

class WatchSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class SessionEvent(_message.Message):
    __slots__ = ("timestamp", "session_id", "command_finished", "session_closed")
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FINISHED_FIELD_NUMBER: _ClassVar[int]
    SESSION_CLOSED_FIELD_NUMBER: _ClassVar[int]
    timestamp: str
    session_id: str
    command_finished: CommandFinished
    session_closed: SessionClosed
    def __init__(self, timestamp: _Optional[str] = ..., session_id: _Optional[str] = ..., command_finished: _Optional[_Union[CommandFinished, _Mapping]] = ..., session_closed: _Optional[_Union[SessionClosed, _Mapping]] = ...) -> None: ...

class CommandFinished(_message.Message):
    __slots__ = ("process_id", "status", "exit_code", "detail", "output_tail", "tail_truncated", "command")
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TAIL_FIELD_NUMBER: _ClassVar[int]
    TAIL_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    status: str
    exit_code: int
    detail: str
    output_tail: str
    tail_truncated: bool
    command: str
    def __init__(self, process_id: _Optional[str] = ..., status: _Optional[str] = ..., exit_code: _Optional[int] = ..., detail: _Optional[str] = ..., output_tail: _Optional[str] = ..., tail_truncated: _Optional[bool] = ..., command: _Optional[str] = ...) -> None: ...

class SessionClosed(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class UploadFilesRequest(_message.Message):
    __slots__ = ("session_id", "destination", "data")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    destination: str
    data: bytes
    def __init__(self, session_id: _Optional[str] = ..., destination: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...

class UploadFilesResponse(_message.Message):
    __slots__ = ("destination", "entries", "bytes")
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    destination: str
    entries: int
    bytes: int
    def __init__(self, destination: _Optional[str] = ..., entries: _Optional[int] = ..., bytes: _Optional[int] = ...) -> None: ...

class DownloadFilesRequest(_message.Message):
    __slots__ = ("session_id", "path")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    path: str
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class DownloadFilesChunk(_message.Message):
    __slots__ = ("data", "size_hint")
    DATA_FIELD_NUMBER: _ClassVar[int]
    SIZE_HINT_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    size_hint: int
    def __init__(self, data: _Optional[bytes] = ..., size_hint: _Optional[int] = ...) -> None: ...
