import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ApplicationState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    APPLICATION_STATE_UNSPECIFIED: _ClassVar[ApplicationState]
    APPLICATION_STATE_SUBMITTED: _ClassVar[ApplicationState]
    APPLICATION_STATE_STARTING: _ClassVar[ApplicationState]
    APPLICATION_STATE_RUNNING: _ClassVar[ApplicationState]
    APPLICATION_STATE_RESTARTING: _ClassVar[ApplicationState]
    APPLICATION_STATE_SUCCEEDED: _ClassVar[ApplicationState]
    APPLICATION_STATE_FAILED: _ClassVar[ApplicationState]
    APPLICATION_STATE_KILLED: _ClassVar[ApplicationState]
    APPLICATION_STATE_QUEUED: _ClassVar[ApplicationState]
    APPLICATION_STATE_SUSPENDED: _ClassVar[ApplicationState]

class ExecutorState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXECUTOR_STATE_UNSPECIFIED: _ClassVar[ExecutorState]
    EXECUTOR_STATE_PLANNED: _ClassVar[ExecutorState]
    EXECUTOR_STATE_LAUNCHED: _ClassVar[ExecutorState]
    EXECUTOR_STATE_REGISTERED: _ClassVar[ExecutorState]
    EXECUTOR_STATE_RUNNING: _ClassVar[ExecutorState]
    EXECUTOR_STATE_SUCCEEDED: _ClassVar[ExecutorState]
    EXECUTOR_STATE_FAILED: _ClassVar[ExecutorState]
    EXECUTOR_STATE_LOST: _ClassVar[ExecutorState]
    EXECUTOR_STATE_KILLED: _ClassVar[ExecutorState]

class LogKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOG_KIND_UNSPECIFIED: _ClassVar[LogKind]
    LOG_KIND_TRAINER: _ClassVar[LogKind]
    LOG_KIND_EXECUTOR: _ClassVar[LogKind]
APPLICATION_STATE_UNSPECIFIED: ApplicationState
APPLICATION_STATE_SUBMITTED: ApplicationState
APPLICATION_STATE_STARTING: ApplicationState
APPLICATION_STATE_RUNNING: ApplicationState
APPLICATION_STATE_RESTARTING: ApplicationState
APPLICATION_STATE_SUCCEEDED: ApplicationState
APPLICATION_STATE_FAILED: ApplicationState
APPLICATION_STATE_KILLED: ApplicationState
APPLICATION_STATE_QUEUED: ApplicationState
APPLICATION_STATE_SUSPENDED: ApplicationState
EXECUTOR_STATE_UNSPECIFIED: ExecutorState
EXECUTOR_STATE_PLANNED: ExecutorState
EXECUTOR_STATE_LAUNCHED: ExecutorState
EXECUTOR_STATE_REGISTERED: ExecutorState
EXECUTOR_STATE_RUNNING: ExecutorState
EXECUTOR_STATE_SUCCEEDED: ExecutorState
EXECUTOR_STATE_FAILED: ExecutorState
EXECUTOR_STATE_LOST: ExecutorState
EXECUTOR_STATE_KILLED: ExecutorState
LOG_KIND_UNSPECIFIED: LogKind
LOG_KIND_TRAINER: LogKind
LOG_KIND_EXECUTOR: LogKind

class ApplicationStatus(_message.Message):
    __slots__ = ("app_id", "name", "state", "attempt", "user", "submit_host", "submit_time", "start_time", "finish_time", "exit_code", "diagnosis", "changes_recorded", "account", "parked", "array", "array_index", "array_size")
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_HOST_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_TIME_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    FINISH_TIME_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    DIAGNOSIS_FIELD_NUMBER: _ClassVar[int]
    CHANGES_RECORDED_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    PARKED_FIELD_NUMBER: _ClassVar[int]
    ARRAY_FIELD_NUMBER: _ClassVar[int]
    ARRAY_INDEX_FIELD_NUMBER: _ClassVar[int]
    ARRAY_SIZE_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    name: str
    state: ApplicationState
    attempt: int
    user: str
    submit_host: str
    submit_time: _timestamp_pb2.Timestamp
    start_time: _timestamp_pb2.Timestamp
    finish_time: _timestamp_pb2.Timestamp
    exit_code: int
    diagnosis: str
    changes_recorded: int
    account: str
    parked: bool
    array: str
    array_index: int
    array_size: int
    def __init__(self, app_id: _Optional[str] = ..., name: _Optional[str] = ..., state: _Optional[_Union[ApplicationState, str]] = ..., attempt: _Optional[int] = ..., user: _Optional[str] = ..., submit_host: _Optional[str] = ..., submit_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finish_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., exit_code: _Optional[int] = ..., diagnosis: _Optional[str] = ..., changes_recorded: _Optional[int] = ..., account: _Optional[str] = ..., parked: _Optional[bool] = ..., array: _Optional[str] = ..., array_index: _Optional[int] = ..., array_size: _Optional[int] = ...) -> None: ...

class AmLeader(_message.Message):
    __slots__ = ("am_id", "host", "pid", "since", "log_file", "start_time")
    AM_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    LOG_FILE_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    am_id: str
    host: str
    pid: int
    since: _timestamp_pb2.Timestamp
    log_file: str
    start_time: _timestamp_pb2.Timestamp
    def __init__(self, am_id: _Optional[str] = ..., host: _Optional[str] = ..., pid: _Optional[int] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., log_file: _Optional[str] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Kill(_message.Message):
    __slots__ = ("time", "user", "reason", "outcome")
    TIME_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    time: _timestamp_pb2.Timestamp
    user: str
    reason: str
    outcome: ApplicationState
    def __init__(self, time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., user: _Optional[str] = ..., reason: _Optional[str] = ..., outcome: _Optional[_Union[ApplicationState, str]] = ...) -> None: ...

class Role(_message.Message):
    __slots__ = ("name", "desired_executors", "spec_json", "removed")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESIRED_EXECUTORS_FIELD_NUMBER: _ClassVar[int]
    SPEC_JSON_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    name: str
    desired_executors: int
    spec_json: str
    removed: bool
    def __init__(self, name: _Optional[str] = ..., desired_executors: _Optional[int] = ..., spec_json: _Optional[str] = ..., removed: _Optional[bool] = ...) -> None: ...

class Application(_message.Message):
    __slots__ = ("status", "am_leader", "spec_json", "roles", "executors", "streams", "cluster", "kill", "events", "revision", "archived", "progress", "leaderless", "pending_changes", "waiting", "reservations", "preemption", "suspend")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    AM_LEADER_FIELD_NUMBER: _ClassVar[int]
    SPEC_JSON_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    EXECUTORS_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    KILL_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    LEADERLESS_FIELD_NUMBER: _ClassVar[int]
    PENDING_CHANGES_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    RESERVATIONS_FIELD_NUMBER: _ClassVar[int]
    PREEMPTION_FIELD_NUMBER: _ClassVar[int]
    SUSPEND_FIELD_NUMBER: _ClassVar[int]
    status: ApplicationStatus
    am_leader: AmLeader
    spec_json: str
    roles: _containers.RepeatedCompositeFieldContainer[Role]
    executors: _containers.RepeatedCompositeFieldContainer[Executor]
    streams: _containers.RepeatedCompositeFieldContainer[Stream]
    cluster: Cluster
    kill: Kill
    events: _containers.RepeatedCompositeFieldContainer[Event]
    revision: int
    archived: bool
    progress: float
    leaderless: bool
    pending_changes: _containers.RepeatedCompositeFieldContainer[TopologyChange]
    waiting: Waiting
    reservations: _containers.RepeatedCompositeFieldContainer[Reservation]
    preemption: Preemption
    suspend: Suspend
    def __init__(self, status: _Optional[_Union[ApplicationStatus, _Mapping]] = ..., am_leader: _Optional[_Union[AmLeader, _Mapping]] = ..., spec_json: _Optional[str] = ..., roles: _Optional[_Iterable[_Union[Role, _Mapping]]] = ..., executors: _Optional[_Iterable[_Union[Executor, _Mapping]]] = ..., streams: _Optional[_Iterable[_Union[Stream, _Mapping]]] = ..., cluster: _Optional[_Union[Cluster, _Mapping]] = ..., kill: _Optional[_Union[Kill, _Mapping]] = ..., events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ..., revision: _Optional[int] = ..., archived: _Optional[bool] = ..., progress: _Optional[float] = ..., leaderless: _Optional[bool] = ..., pending_changes: _Optional[_Iterable[_Union[TopologyChange, _Mapping]]] = ..., waiting: _Optional[_Union[Waiting, _Mapping]] = ..., reservations: _Optional[_Iterable[_Union[Reservation, _Mapping]]] = ..., preemption: _Optional[_Union[Preemption, _Mapping]] = ..., suspend: _Optional[_Union[Suspend, _Mapping]] = ...) -> None: ...

class TopologyChange(_message.Message):
    __slots__ = ("seq", "time", "user", "kind", "message", "role", "stream")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    seq: int
    time: _timestamp_pb2.Timestamp
    user: str
    kind: str
    message: str
    role: str
    stream: str
    def __init__(self, seq: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., user: _Optional[str] = ..., kind: _Optional[str] = ..., message: _Optional[str] = ..., role: _Optional[str] = ..., stream: _Optional[str] = ...) -> None: ...

class Waiting(_message.Message):
    __slots__ = ("reason", "since", "hosts")
    REASON_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    reason: str
    since: _timestamp_pb2.Timestamp
    hosts: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, reason: _Optional[str] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., hosts: _Optional[_Iterable[str]] = ...) -> None: ...

class Reservation(_message.Message):
    __slots__ = ("app_id", "user", "queue", "role", "index", "host", "cpu", "memory", "gpus", "since", "preemptible", "seal", "array")
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    CPU_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIBLE_FIELD_NUMBER: _ClassVar[int]
    SEAL_FIELD_NUMBER: _ClassVar[int]
    ARRAY_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    user: str
    queue: str
    role: str
    index: int
    host: str
    cpu: float
    memory: int
    gpus: _containers.RepeatedScalarFieldContainer[int]
    since: _timestamp_pb2.Timestamp
    preemptible: bool
    seal: str
    array: str
    def __init__(self, app_id: _Optional[str] = ..., user: _Optional[str] = ..., queue: _Optional[str] = ..., role: _Optional[str] = ..., index: _Optional[int] = ..., host: _Optional[str] = ..., cpu: _Optional[float] = ..., memory: _Optional[int] = ..., gpus: _Optional[_Iterable[int]] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., preemptible: _Optional[bool] = ..., seal: _Optional[str] = ..., array: _Optional[str] = ...) -> None: ...

class Preemption(_message.Message):
    __slots__ = ("by", "time", "reason", "seal")
    BY_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SEAL_FIELD_NUMBER: _ClassVar[int]
    by: str
    time: _timestamp_pb2.Timestamp
    reason: str
    seal: str
    def __init__(self, by: _Optional[str] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., reason: _Optional[str] = ..., seal: _Optional[str] = ...) -> None: ...

class Suspend(_message.Message):
    __slots__ = ("time", "user", "reason")
    TIME_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    time: _timestamp_pb2.Timestamp
    user: str
    reason: str
    def __init__(self, time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., user: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ApplicationSummary(_message.Message):
    __slots__ = ("status", "am_leader", "queue", "archived", "progress", "waiting", "leaderless")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    AM_LEADER_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    LEADERLESS_FIELD_NUMBER: _ClassVar[int]
    status: ApplicationStatus
    am_leader: AmLeader
    queue: str
    archived: bool
    progress: float
    waiting: str
    leaderless: bool
    def __init__(self, status: _Optional[_Union[ApplicationStatus, _Mapping]] = ..., am_leader: _Optional[_Union[AmLeader, _Mapping]] = ..., queue: _Optional[str] = ..., archived: _Optional[bool] = ..., progress: _Optional[float] = ..., waiting: _Optional[str] = ..., leaderless: _Optional[bool] = ...) -> None: ...

class ProcessRef(_message.Message):
    __slots__ = ("host", "pid", "start_time")
    HOST_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    host: str
    pid: int
    start_time: _timestamp_pb2.Timestamp
    def __init__(self, host: _Optional[str] = ..., pid: _Optional[int] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ExecutorPlan(_message.Message):
    __slots__ = ("role", "index", "attempt", "host", "address", "state", "launch_time", "release_time", "exit_code", "diagnosis", "process", "trainer", "log_file", "executor_log", "app_attempt", "failures", "restarts", "restart_at", "retired", "gpus", "exit_class", "numa_nodes", "nics", "past")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_TIME_FIELD_NUMBER: _ClassVar[int]
    RELEASE_TIME_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    DIAGNOSIS_FIELD_NUMBER: _ClassVar[int]
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    TRAINER_FIELD_NUMBER: _ClassVar[int]
    LOG_FILE_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_LOG_FIELD_NUMBER: _ClassVar[int]
    APP_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    RESTART_AT_FIELD_NUMBER: _ClassVar[int]
    RETIRED_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    EXIT_CLASS_FIELD_NUMBER: _ClassVar[int]
    NUMA_NODES_FIELD_NUMBER: _ClassVar[int]
    NICS_FIELD_NUMBER: _ClassVar[int]
    PAST_FIELD_NUMBER: _ClassVar[int]
    role: str
    index: int
    attempt: int
    host: str
    address: str
    state: ExecutorState
    launch_time: _timestamp_pb2.Timestamp
    release_time: _timestamp_pb2.Timestamp
    exit_code: int
    diagnosis: str
    process: ProcessRef
    trainer: ProcessRef
    log_file: str
    executor_log: str
    app_attempt: int
    failures: int
    restarts: int
    restart_at: _timestamp_pb2.Timestamp
    retired: bool
    gpus: _containers.RepeatedScalarFieldContainer[int]
    exit_class: str
    numa_nodes: _containers.RepeatedScalarFieldContainer[int]
    nics: _containers.RepeatedScalarFieldContainer[str]
    past: _containers.RepeatedCompositeFieldContainer[PastAttempt]
    def __init__(self, role: _Optional[str] = ..., index: _Optional[int] = ..., attempt: _Optional[int] = ..., host: _Optional[str] = ..., address: _Optional[str] = ..., state: _Optional[_Union[ExecutorState, str]] = ..., launch_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., release_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., exit_code: _Optional[int] = ..., diagnosis: _Optional[str] = ..., process: _Optional[_Union[ProcessRef, _Mapping]] = ..., trainer: _Optional[_Union[ProcessRef, _Mapping]] = ..., log_file: _Optional[str] = ..., executor_log: _Optional[str] = ..., app_attempt: _Optional[int] = ..., failures: _Optional[int] = ..., restarts: _Optional[int] = ..., restart_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., retired: _Optional[bool] = ..., gpus: _Optional[_Iterable[int]] = ..., exit_class: _Optional[str] = ..., numa_nodes: _Optional[_Iterable[int]] = ..., nics: _Optional[_Iterable[str]] = ..., past: _Optional[_Iterable[_Union[PastAttempt, _Mapping]]] = ...) -> None: ...

class PastAttempt(_message.Message):
    __slots__ = ("attempt", "host", "state", "launch_time", "release_time", "exit_code", "exit_class")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_TIME_FIELD_NUMBER: _ClassVar[int]
    RELEASE_TIME_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CLASS_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    host: str
    state: ExecutorState
    launch_time: _timestamp_pb2.Timestamp
    release_time: _timestamp_pb2.Timestamp
    exit_code: int
    exit_class: str
    def __init__(self, attempt: _Optional[int] = ..., host: _Optional[str] = ..., state: _Optional[_Union[ExecutorState, str]] = ..., launch_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., release_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., exit_code: _Optional[int] = ..., exit_class: _Optional[str] = ...) -> None: ...

class ExecutorLive(_message.Message):
    __slots__ = ("attempt", "host", "address", "pid", "ports", "state", "registered_time", "trainer", "trainer_start_time")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_TIME_FIELD_NUMBER: _ClassVar[int]
    TRAINER_FIELD_NUMBER: _ClassVar[int]
    TRAINER_START_TIME_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    host: str
    address: str
    pid: int
    ports: _containers.RepeatedScalarFieldContainer[int]
    state: ExecutorState
    registered_time: _timestamp_pb2.Timestamp
    trainer: ProcessRef
    trainer_start_time: _timestamp_pb2.Timestamp
    def __init__(self, attempt: _Optional[int] = ..., host: _Optional[str] = ..., address: _Optional[str] = ..., pid: _Optional[int] = ..., ports: _Optional[_Iterable[int]] = ..., state: _Optional[_Union[ExecutorState, str]] = ..., registered_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., trainer: _Optional[_Union[ProcessRef, _Mapping]] = ..., trainer_start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ExecutorResult(_message.Message):
    __slots__ = ("attempt", "exit_code", "finish_time", "diagnosis", "exit_class")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    FINISH_TIME_FIELD_NUMBER: _ClassVar[int]
    DIAGNOSIS_FIELD_NUMBER: _ClassVar[int]
    EXIT_CLASS_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    exit_code: int
    finish_time: _timestamp_pb2.Timestamp
    diagnosis: str
    exit_class: str
    def __init__(self, attempt: _Optional[int] = ..., exit_code: _Optional[int] = ..., finish_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., diagnosis: _Optional[str] = ..., exit_class: _Optional[str] = ...) -> None: ...

class Executor(_message.Message):
    __slots__ = ("role", "index", "plan", "live", "result", "usage")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    LIVE_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    role: str
    index: int
    plan: ExecutorPlan
    live: ExecutorLive
    result: ExecutorResult
    usage: ExecutorUsage
    def __init__(self, role: _Optional[str] = ..., index: _Optional[int] = ..., plan: _Optional[_Union[ExecutorPlan, _Mapping]] = ..., live: _Optional[_Union[ExecutorLive, _Mapping]] = ..., result: _Optional[_Union[ExecutorResult, _Mapping]] = ..., usage: _Optional[_Union[ExecutorUsage, _Mapping]] = ...) -> None: ...

class ExecutorUsage(_message.Message):
    __slots__ = ("attempt", "time", "cpu", "cpu_seconds", "memory", "memory_peak", "cpu_reserved", "memory_reserved")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    CPU_FIELD_NUMBER: _ClassVar[int]
    CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    MEMORY_PEAK_FIELD_NUMBER: _ClassVar[int]
    CPU_RESERVED_FIELD_NUMBER: _ClassVar[int]
    MEMORY_RESERVED_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    time: _timestamp_pb2.Timestamp
    cpu: float
    cpu_seconds: float
    memory: int
    memory_peak: int
    cpu_reserved: float
    memory_reserved: int
    def __init__(self, attempt: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., cpu: _Optional[float] = ..., cpu_seconds: _Optional[float] = ..., memory: _Optional[int] = ..., memory_peak: _Optional[int] = ..., cpu_reserved: _Optional[float] = ..., memory_reserved: _Optional[int] = ...) -> None: ...

class Cluster(_message.Message):
    __slots__ = ("attempt", "version", "members", "master_addr", "master_port")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    MASTER_PORT_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    version: int
    members: _containers.RepeatedCompositeFieldContainer[ClusterMember]
    master_addr: str
    master_port: int
    def __init__(self, attempt: _Optional[int] = ..., version: _Optional[int] = ..., members: _Optional[_Iterable[_Union[ClusterMember, _Mapping]]] = ..., master_addr: _Optional[str] = ..., master_port: _Optional[int] = ...) -> None: ...

class ClusterMember(_message.Message):
    __slots__ = ("role", "index", "rank", "address", "ports", "attempt")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    role: str
    index: int
    rank: int
    address: str
    ports: _containers.RepeatedScalarFieldContainer[int]
    attempt: int
    def __init__(self, role: _Optional[str] = ..., index: _Optional[int] = ..., rank: _Optional[int] = ..., address: _Optional[str] = ..., ports: _Optional[_Iterable[int]] = ..., attempt: _Optional[int] = ...) -> None: ...

class StreamStats(_message.Message):
    __slots__ = ("tasks", "done", "failed", "records", "bytes", "exhausted", "lag", "failed_records", "failed_bytes", "lags", "epoch", "readers", "readers_partial")
    class LagsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class ReadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    TASKS_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    EXHAUSTED_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    FAILED_RECORDS_FIELD_NUMBER: _ClassVar[int]
    FAILED_BYTES_FIELD_NUMBER: _ClassVar[int]
    LAGS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    READERS_FIELD_NUMBER: _ClassVar[int]
    READERS_PARTIAL_FIELD_NUMBER: _ClassVar[int]
    tasks: int
    done: int
    failed: int
    records: int
    bytes: int
    exhausted: bool
    lag: int
    failed_records: int
    failed_bytes: int
    lags: _containers.ScalarMap[str, int]
    epoch: int
    readers: _containers.ScalarMap[str, int]
    readers_partial: bool
    def __init__(self, tasks: _Optional[int] = ..., done: _Optional[int] = ..., failed: _Optional[int] = ..., records: _Optional[int] = ..., bytes: _Optional[int] = ..., exhausted: _Optional[bool] = ..., lag: _Optional[int] = ..., failed_records: _Optional[int] = ..., failed_bytes: _Optional[int] = ..., lags: _Optional[_Mapping[str, int]] = ..., epoch: _Optional[int] = ..., readers: _Optional[_Mapping[str, int]] = ..., readers_partial: _Optional[bool] = ...) -> None: ...

class Stream(_message.Message):
    __slots__ = ("name", "stats")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    name: str
    stats: StreamStats
    def __init__(self, name: _Optional[str] = ..., stats: _Optional[_Union[StreamStats, _Mapping]] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("seq", "time", "kind", "message", "role", "index")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    seq: int
    time: _timestamp_pb2.Timestamp
    kind: str
    message: str
    role: str
    index: int
    def __init__(self, seq: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., kind: _Optional[str] = ..., message: _Optional[str] = ..., role: _Optional[str] = ..., index: _Optional[int] = ...) -> None: ...

class SshSettings(_message.Message):
    __slots__ = ("port", "user", "key_file", "extra_args")
    PORT_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    KEY_FILE_FIELD_NUMBER: _ClassVar[int]
    EXTRA_ARGS_FIELD_NUMBER: _ClassVar[int]
    port: int
    user: str
    key_file: str
    extra_args: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, port: _Optional[int] = ..., user: _Optional[str] = ..., key_file: _Optional[str] = ..., extra_args: _Optional[_Iterable[str]] = ...) -> None: ...

class Host(_message.Message):
    __slots__ = ("name", "address", "launcher", "ssh", "python", "home", "slots", "cpu", "memory", "gpus", "groups", "labels", "health_check", "gpu_topology", "gpu_nvlink", "domains", "gpu_nics")
    class DomainsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LAUNCHER_FIELD_NUMBER: _ClassVar[int]
    SSH_FIELD_NUMBER: _ClassVar[int]
    PYTHON_FIELD_NUMBER: _ClassVar[int]
    HOME_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    CPU_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    HEALTH_CHECK_FIELD_NUMBER: _ClassVar[int]
    GPU_TOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    GPU_NVLINK_FIELD_NUMBER: _ClassVar[int]
    DOMAINS_FIELD_NUMBER: _ClassVar[int]
    GPU_NICS_FIELD_NUMBER: _ClassVar[int]
    name: str
    address: str
    launcher: str
    ssh: SshSettings
    python: str
    home: str
    slots: int
    cpu: float
    memory: int
    gpus: int
    groups: _containers.RepeatedScalarFieldContainer[str]
    labels: _containers.RepeatedScalarFieldContainer[str]
    health_check: str
    gpu_topology: str
    gpu_nvlink: str
    domains: _containers.ScalarMap[str, str]
    gpu_nics: str
    def __init__(self, name: _Optional[str] = ..., address: _Optional[str] = ..., launcher: _Optional[str] = ..., ssh: _Optional[_Union[SshSettings, _Mapping]] = ..., python: _Optional[str] = ..., home: _Optional[str] = ..., slots: _Optional[int] = ..., cpu: _Optional[float] = ..., memory: _Optional[int] = ..., gpus: _Optional[int] = ..., groups: _Optional[_Iterable[str]] = ..., labels: _Optional[_Iterable[str]] = ..., health_check: _Optional[str] = ..., gpu_topology: _Optional[str] = ..., gpu_nvlink: _Optional[str] = ..., domains: _Optional[_Mapping[str, str]] = ..., gpu_nics: _Optional[str] = ...) -> None: ...

class HostProbe(_message.Message):
    __slots__ = ("ok", "error", "primus_version", "cpu", "memory", "gpus", "load", "home", "cgroups", "account", "gpu_topology", "gpu_nvlink", "gpu_devices")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PRIMUS_VERSION_FIELD_NUMBER: _ClassVar[int]
    CPU_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    HOME_FIELD_NUMBER: _ClassVar[int]
    CGROUPS_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    GPU_TOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    GPU_NVLINK_FIELD_NUMBER: _ClassVar[int]
    GPU_DEVICES_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    error: str
    primus_version: str
    cpu: int
    memory: int
    gpus: int
    load: float
    home: str
    cgroups: str
    account: HostAccount
    gpu_topology: str
    gpu_nvlink: str
    gpu_devices: _containers.RepeatedCompositeFieldContainer[GpuDevice]
    def __init__(self, ok: _Optional[bool] = ..., error: _Optional[str] = ..., primus_version: _Optional[str] = ..., cpu: _Optional[int] = ..., memory: _Optional[int] = ..., gpus: _Optional[int] = ..., load: _Optional[float] = ..., home: _Optional[str] = ..., cgroups: _Optional[str] = ..., account: _Optional[_Union[HostAccount, _Mapping]] = ..., gpu_topology: _Optional[str] = ..., gpu_nvlink: _Optional[str] = ..., gpu_devices: _Optional[_Iterable[_Union[GpuDevice, _Mapping]]] = ...) -> None: ...

class GpuDevice(_message.Message):
    __slots__ = ("index", "uuid", "pci_bus_id", "numa_node", "cpu_affinity")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    PCI_BUS_ID_FIELD_NUMBER: _ClassVar[int]
    NUMA_NODE_FIELD_NUMBER: _ClassVar[int]
    CPU_AFFINITY_FIELD_NUMBER: _ClassVar[int]
    index: int
    uuid: str
    pci_bus_id: str
    numa_node: int
    cpu_affinity: str
    def __init__(self, index: _Optional[int] = ..., uuid: _Optional[str] = ..., pci_bus_id: _Optional[str] = ..., numa_node: _Optional[int] = ..., cpu_affinity: _Optional[str] = ...) -> None: ...

class HostAccount(_message.Message):
    __slots__ = ("name", "uid", "home", "groups")
    NAME_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    HOME_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    name: str
    uid: int
    home: str
    groups: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., uid: _Optional[int] = ..., home: _Optional[str] = ..., groups: _Optional[_Iterable[str]] = ...) -> None: ...

class SubmitApplicationRequest(_message.Message):
    __slots__ = ("job", "job_source", "overrides", "secret_env", "base_directory", "files", "inventory", "inventory_source")
    class SecretEnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    JOB_FIELD_NUMBER: _ClassVar[int]
    JOB_SOURCE_FIELD_NUMBER: _ClassVar[int]
    OVERRIDES_FIELD_NUMBER: _ClassVar[int]
    SECRET_ENV_FIELD_NUMBER: _ClassVar[int]
    BASE_DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    INVENTORY_FIELD_NUMBER: _ClassVar[int]
    INVENTORY_SOURCE_FIELD_NUMBER: _ClassVar[int]
    job: str
    job_source: str
    overrides: _containers.RepeatedScalarFieldContainer[str]
    secret_env: _containers.ScalarMap[str, str]
    base_directory: str
    files: _containers.RepeatedCompositeFieldContainer[File]
    inventory: str
    inventory_source: str
    def __init__(self, job: _Optional[str] = ..., job_source: _Optional[str] = ..., overrides: _Optional[_Iterable[str]] = ..., secret_env: _Optional[_Mapping[str, str]] = ..., base_directory: _Optional[str] = ..., files: _Optional[_Iterable[_Union[File, _Mapping]]] = ..., inventory: _Optional[str] = ..., inventory_source: _Optional[str] = ...) -> None: ...

class File(_message.Message):
    __slots__ = ("path", "content", "mode")
    PATH_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    path: str
    content: bytes
    mode: int
    def __init__(self, path: _Optional[str] = ..., content: _Optional[bytes] = ..., mode: _Optional[int] = ...) -> None: ...

class SubmitApplicationResponse(_message.Message):
    __slots__ = ("app_id", "status", "revision", "array", "app_ids")
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    ARRAY_FIELD_NUMBER: _ClassVar[int]
    APP_IDS_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    status: ApplicationStatus
    revision: int
    array: str
    app_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, app_id: _Optional[str] = ..., status: _Optional[_Union[ApplicationStatus, _Mapping]] = ..., revision: _Optional[int] = ..., array: _Optional[str] = ..., app_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ListApplicationsRequest(_message.Message):
    __slots__ = ("states", "user", "name", "page_size", "page_token", "include_history", "array")
    STATES_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_HISTORY_FIELD_NUMBER: _ClassVar[int]
    ARRAY_FIELD_NUMBER: _ClassVar[int]
    states: _containers.RepeatedScalarFieldContainer[ApplicationState]
    user: str
    name: str
    page_size: int
    page_token: str
    include_history: bool
    array: str
    def __init__(self, states: _Optional[_Iterable[_Union[ApplicationState, str]]] = ..., user: _Optional[str] = ..., name: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., include_history: _Optional[bool] = ..., array: _Optional[str] = ...) -> None: ...

class ListApplicationsResponse(_message.Message):
    __slots__ = ("applications", "next_page_token")
    APPLICATIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    applications: _containers.RepeatedCompositeFieldContainer[ApplicationSummary]
    next_page_token: str
    def __init__(self, applications: _Optional[_Iterable[_Union[ApplicationSummary, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetApplicationRequest(_message.Message):
    __slots__ = ("app_id", "events")
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    events: int
    def __init__(self, app_id: _Optional[str] = ..., events: _Optional[int] = ...) -> None: ...

class WatchApplicationRequest(_message.Message):
    __slots__ = ("app_id", "after_revision", "snapshot_events", "progress_interval")
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_REVISION_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_EVENTS_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    after_revision: int
    snapshot_events: int
    progress_interval: _duration_pb2.Duration
    def __init__(self, app_id: _Optional[str] = ..., after_revision: _Optional[int] = ..., snapshot_events: _Optional[int] = ..., progress_interval: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class WatchApplicationResponse(_message.Message):
    __slots__ = ("revision", "snapshot", "changes")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    revision: int
    snapshot: Application
    changes: _containers.RepeatedCompositeFieldContainer[ApplicationChange]
    def __init__(self, revision: _Optional[int] = ..., snapshot: _Optional[_Union[Application, _Mapping]] = ..., changes: _Optional[_Iterable[_Union[ApplicationChange, _Mapping]]] = ...) -> None: ...

class ApplicationChange(_message.Message):
    __slots__ = ("status", "am_leader", "role", "executor", "stream", "cluster", "kill", "event")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    AM_LEADER_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    KILL_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    status: ApplicationStatus
    am_leader: AmLeaderChange
    role: Role
    executor: Executor
    stream: Stream
    cluster: ClusterChange
    kill: Kill
    event: Event
    def __init__(self, status: _Optional[_Union[ApplicationStatus, _Mapping]] = ..., am_leader: _Optional[_Union[AmLeaderChange, _Mapping]] = ..., role: _Optional[_Union[Role, _Mapping]] = ..., executor: _Optional[_Union[Executor, _Mapping]] = ..., stream: _Optional[_Union[Stream, _Mapping]] = ..., cluster: _Optional[_Union[ClusterChange, _Mapping]] = ..., kill: _Optional[_Union[Kill, _Mapping]] = ..., event: _Optional[_Union[Event, _Mapping]] = ...) -> None: ...

class AmLeaderChange(_message.Message):
    __slots__ = ("leader",)
    LEADER_FIELD_NUMBER: _ClassVar[int]
    leader: AmLeader
    def __init__(self, leader: _Optional[_Union[AmLeader, _Mapping]] = ...) -> None: ...

class ClusterChange(_message.Message):
    __slots__ = ("cluster",)
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    cluster: Cluster
    def __init__(self, cluster: _Optional[_Union[Cluster, _Mapping]] = ...) -> None: ...

class KillApplicationRequest(_message.Message):
    __slots__ = ("app_id", "reason")
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    reason: str
    def __init__(self, app_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class KillApplicationResponse(_message.Message):
    __slots__ = ("revision",)
    REVISION_FIELD_NUMBER: _ClassVar[int]
    revision: int
    def __init__(self, revision: _Optional[int] = ...) -> None: ...

class SucceedApplicationRequest(_message.Message):
    __slots__ = ("app_id", "reason")
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    reason: str
    def __init__(self, app_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class SuspendApplicationRequest(_message.Message):
    __slots__ = ("app_id", "reason")
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    reason: str
    def __init__(self, app_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class SuspendApplicationResponse(_message.Message):
    __slots__ = ("revision",)
    REVISION_FIELD_NUMBER: _ClassVar[int]
    revision: int
    def __init__(self, revision: _Optional[int] = ...) -> None: ...

class ResumeApplicationRequest(_message.Message):
    __slots__ = ("app_id",)
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    def __init__(self, app_id: _Optional[str] = ...) -> None: ...

class ResumeApplicationResponse(_message.Message):
    __slots__ = ("revision",)
    REVISION_FIELD_NUMBER: _ClassVar[int]
    revision: int
    def __init__(self, revision: _Optional[int] = ...) -> None: ...

class SucceedApplicationResponse(_message.Message):
    __slots__ = ("revision",)
    REVISION_FIELD_NUMBER: _ClassVar[int]
    revision: int
    def __init__(self, revision: _Optional[int] = ...) -> None: ...

class ScaleRoleRequest(_message.Message):
    __slots__ = ("app_id", "role", "executors")
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    EXECUTORS_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    role: str
    executors: int
    def __init__(self, app_id: _Optional[str] = ..., role: _Optional[str] = ..., executors: _Optional[int] = ...) -> None: ...

class ResizeRoleRequest(_message.Message):
    __slots__ = ("app_id", "role", "cpu", "memory")
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CPU_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    role: str
    cpu: float
    memory: str
    def __init__(self, app_id: _Optional[str] = ..., role: _Optional[str] = ..., cpu: _Optional[float] = ..., memory: _Optional[str] = ...) -> None: ...

class ResizeRoleResponse(_message.Message):
    __slots__ = ("role", "revision", "change")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    role: Role
    revision: int
    change: TopologyChange
    def __init__(self, role: _Optional[_Union[Role, _Mapping]] = ..., revision: _Optional[int] = ..., change: _Optional[_Union[TopologyChange, _Mapping]] = ...) -> None: ...

class ScaleRoleResponse(_message.Message):
    __slots__ = ("role", "previous_executors", "revision", "change")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_EXECUTORS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    role: Role
    previous_executors: int
    revision: int
    change: TopologyChange
    def __init__(self, role: _Optional[_Union[Role, _Mapping]] = ..., previous_executors: _Optional[int] = ..., revision: _Optional[int] = ..., change: _Optional[_Union[TopologyChange, _Mapping]] = ...) -> None: ...

class AddRoleRequest(_message.Message):
    __slots__ = ("app_id", "role", "role_source")
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ROLE_SOURCE_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    role: str
    role_source: str
    def __init__(self, app_id: _Optional[str] = ..., role: _Optional[str] = ..., role_source: _Optional[str] = ...) -> None: ...

class AddRoleResponse(_message.Message):
    __slots__ = ("role", "revision", "change")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    role: Role
    revision: int
    change: TopologyChange
    def __init__(self, role: _Optional[_Union[Role, _Mapping]] = ..., revision: _Optional[int] = ..., change: _Optional[_Union[TopologyChange, _Mapping]] = ...) -> None: ...

class RemoveRoleRequest(_message.Message):
    __slots__ = ("app_id", "role")
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    role: str
    def __init__(self, app_id: _Optional[str] = ..., role: _Optional[str] = ...) -> None: ...

class RemoveRoleResponse(_message.Message):
    __slots__ = ("revision", "change")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    revision: int
    change: TopologyChange
    def __init__(self, revision: _Optional[int] = ..., change: _Optional[_Union[TopologyChange, _Mapping]] = ...) -> None: ...

class AddDataSourceRequest(_message.Message):
    __slots__ = ("app_id", "stream", "source")
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    stream: str
    source: str
    def __init__(self, app_id: _Optional[str] = ..., stream: _Optional[str] = ..., source: _Optional[str] = ...) -> None: ...

class AddDataSourceResponse(_message.Message):
    __slots__ = ("files", "revision", "change")
    FILES_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    files: int
    revision: int
    change: TopologyChange
    def __init__(self, files: _Optional[int] = ..., revision: _Optional[int] = ..., change: _Optional[_Union[TopologyChange, _Mapping]] = ...) -> None: ...

class ExecutorRef(_message.Message):
    __slots__ = ("role", "index")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    role: str
    index: int
    def __init__(self, role: _Optional[str] = ..., index: _Optional[int] = ...) -> None: ...

class GetLogsRequest(_message.Message):
    __slots__ = ("app_id", "executor", "am", "kind", "follow", "offset")
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    AM_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    executor: ExecutorRef
    am: bool
    kind: LogKind
    follow: bool
    offset: int
    def __init__(self, app_id: _Optional[str] = ..., executor: _Optional[_Union[ExecutorRef, _Mapping]] = ..., am: _Optional[bool] = ..., kind: _Optional[_Union[LogKind, str]] = ..., follow: _Optional[bool] = ..., offset: _Optional[int] = ...) -> None: ...

class GetLogsResponse(_message.Message):
    __slots__ = ("source", "lines", "sources", "offset")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    LINES_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    source: str
    lines: _containers.RepeatedScalarFieldContainer[str]
    sources: int
    offset: int
    def __init__(self, source: _Optional[str] = ..., lines: _Optional[_Iterable[str]] = ..., sources: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class ListHostsRequest(_message.Message):
    __slots__ = ("probe", "inventory", "inventory_source")
    PROBE_FIELD_NUMBER: _ClassVar[int]
    INVENTORY_FIELD_NUMBER: _ClassVar[int]
    INVENTORY_SOURCE_FIELD_NUMBER: _ClassVar[int]
    probe: bool
    inventory: str
    inventory_source: str
    def __init__(self, probe: _Optional[bool] = ..., inventory: _Optional[str] = ..., inventory_source: _Optional[str] = ...) -> None: ...

class HostInfo(_message.Message):
    __slots__ = ("host", "probe")
    HOST_FIELD_NUMBER: _ClassVar[int]
    PROBE_FIELD_NUMBER: _ClassVar[int]
    host: Host
    probe: HostProbe
    def __init__(self, host: _Optional[_Union[Host, _Mapping]] = ..., probe: _Optional[_Union[HostProbe, _Mapping]] = ...) -> None: ...

class ListHostsResponse(_message.Message):
    __slots__ = ("hosts",)
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    hosts: _containers.RepeatedCompositeFieldContainer[HostInfo]
    def __init__(self, hosts: _Optional[_Iterable[_Union[HostInfo, _Mapping]]] = ...) -> None: ...

class RecoverApplicationRequest(_message.Message):
    __slots__ = ("app_id", "host")
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    host: str
    def __init__(self, app_id: _Optional[str] = ..., host: _Optional[str] = ...) -> None: ...

class RecoverApplicationResponse(_message.Message):
    __slots__ = ("host",)
    HOST_FIELD_NUMBER: _ClassVar[int]
    host: str
    def __init__(self, host: _Optional[str] = ...) -> None: ...

class ListQueueRequest(_message.Message):
    __slots__ = ("limit",)
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    limit: int
    def __init__(self, limit: _Optional[int] = ...) -> None: ...

class QueuedApplication(_message.Message):
    __slots__ = ("position", "queue", "priority", "app_id", "user", "submit_time", "executors", "waiting")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_TIME_FIELD_NUMBER: _ClassVar[int]
    EXECUTORS_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    position: int
    queue: str
    priority: int
    app_id: str
    user: str
    submit_time: _timestamp_pb2.Timestamp
    executors: _containers.RepeatedCompositeFieldContainer[ExecutorRef]
    waiting: Waiting
    def __init__(self, position: _Optional[int] = ..., queue: _Optional[str] = ..., priority: _Optional[int] = ..., app_id: _Optional[str] = ..., user: _Optional[str] = ..., submit_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., executors: _Optional[_Iterable[_Union[ExecutorRef, _Mapping]]] = ..., waiting: _Optional[_Union[Waiting, _Mapping]] = ...) -> None: ...

class ListQueueResponse(_message.Message):
    __slots__ = ("applications", "total")
    APPLICATIONS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    applications: _containers.RepeatedCompositeFieldContainer[QueuedApplication]
    total: int
    def __init__(self, applications: _Optional[_Iterable[_Union[QueuedApplication, _Mapping]]] = ..., total: _Optional[int] = ...) -> None: ...

class GetHostUsageRequest(_message.Message):
    __slots__ = ("inventory", "inventory_source")
    INVENTORY_FIELD_NUMBER: _ClassVar[int]
    INVENTORY_SOURCE_FIELD_NUMBER: _ClassVar[int]
    inventory: str
    inventory_source: str
    def __init__(self, inventory: _Optional[str] = ..., inventory_source: _Optional[str] = ...) -> None: ...

class HostFree(_message.Message):
    __slots__ = ("slots", "cpu", "memory", "devices")
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    CPU_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    slots: int
    cpu: float
    memory: int
    devices: GpuDevices
    def __init__(self, slots: _Optional[int] = ..., cpu: _Optional[float] = ..., memory: _Optional[int] = ..., devices: _Optional[_Union[GpuDevices, _Mapping]] = ...) -> None: ...

class GpuDevices(_message.Message):
    __slots__ = ("indices",)
    INDICES_FIELD_NUMBER: _ClassVar[int]
    indices: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, indices: _Optional[_Iterable[int]] = ...) -> None: ...

class HostUsage(_message.Message):
    __slots__ = ("host", "reservations", "free", "condition")
    HOST_FIELD_NUMBER: _ClassVar[int]
    RESERVATIONS_FIELD_NUMBER: _ClassVar[int]
    FREE_FIELD_NUMBER: _ClassVar[int]
    CONDITION_FIELD_NUMBER: _ClassVar[int]
    host: Host
    reservations: _containers.RepeatedCompositeFieldContainer[Reservation]
    free: HostFree
    condition: HostCondition
    def __init__(self, host: _Optional[_Union[Host, _Mapping]] = ..., reservations: _Optional[_Iterable[_Union[Reservation, _Mapping]]] = ..., free: _Optional[_Union[HostFree, _Mapping]] = ..., condition: _Optional[_Union[HostCondition, _Mapping]] = ...) -> None: ...

class HostCondition(_message.Message):
    __slots__ = ("state", "reason", "since", "by", "passes")
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    PASSES_FIELD_NUMBER: _ClassVar[int]
    state: str
    reason: str
    since: float
    by: str
    passes: int
    def __init__(self, state: _Optional[str] = ..., reason: _Optional[str] = ..., since: _Optional[float] = ..., by: _Optional[str] = ..., passes: _Optional[int] = ...) -> None: ...

class DrainHostRequest(_message.Message):
    __slots__ = ("host", "reason")
    HOST_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    host: str
    reason: str
    def __init__(self, host: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class DrainHostResponse(_message.Message):
    __slots__ = ("condition",)
    CONDITION_FIELD_NUMBER: _ClassVar[int]
    condition: HostCondition
    def __init__(self, condition: _Optional[_Union[HostCondition, _Mapping]] = ...) -> None: ...

class ResumeHostRequest(_message.Message):
    __slots__ = ("host",)
    HOST_FIELD_NUMBER: _ClassVar[int]
    host: str
    def __init__(self, host: _Optional[str] = ...) -> None: ...

class ResumeHostResponse(_message.Message):
    __slots__ = ("condition",)
    CONDITION_FIELD_NUMBER: _ClassVar[int]
    condition: HostCondition
    def __init__(self, condition: _Optional[_Union[HostCondition, _Mapping]] = ...) -> None: ...

class GetHostUsageResponse(_message.Message):
    __slots__ = ("hosts",)
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    hosts: _containers.RepeatedCompositeFieldContainer[HostUsage]
    def __init__(self, hosts: _Optional[_Iterable[_Union[HostUsage, _Mapping]]] = ...) -> None: ...

class GetStacksRequest(_message.Message):
    __slots__ = ("app_id", "hang")
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    HANG_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    hang: int
    def __init__(self, app_id: _Optional[str] = ..., hang: _Optional[int] = ...) -> None: ...

class Hang(_message.Message):
    __slots__ = ("id", "role", "index", "host", "idle", "time", "handled", "summary", "restart")
    ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    IDLE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    HANDLED_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    RESTART_FIELD_NUMBER: _ClassVar[int]
    id: int
    role: str
    index: int
    host: str
    idle: float
    time: _timestamp_pb2.Timestamp
    handled: bool
    summary: str
    restart: bool
    def __init__(self, id: _Optional[int] = ..., role: _Optional[str] = ..., index: _Optional[int] = ..., host: _Optional[str] = ..., idle: _Optional[float] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., handled: _Optional[bool] = ..., summary: _Optional[str] = ..., restart: _Optional[bool] = ...) -> None: ...

class TrainerStacks(_message.Message):
    __slots__ = ("role", "index", "attempt", "host", "idle", "where", "text", "python")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    IDLE_FIELD_NUMBER: _ClassVar[int]
    WHERE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PYTHON_FIELD_NUMBER: _ClassVar[int]
    role: str
    index: int
    attempt: int
    host: str
    idle: float
    where: str
    text: str
    python: bool
    def __init__(self, role: _Optional[str] = ..., index: _Optional[int] = ..., attempt: _Optional[int] = ..., host: _Optional[str] = ..., idle: _Optional[float] = ..., where: _Optional[str] = ..., text: _Optional[str] = ..., python: _Optional[bool] = ...) -> None: ...

class GetStacksResponse(_message.Message):
    __slots__ = ("hang", "stacks", "hangs")
    HANG_FIELD_NUMBER: _ClassVar[int]
    STACKS_FIELD_NUMBER: _ClassVar[int]
    HANGS_FIELD_NUMBER: _ClassVar[int]
    hang: Hang
    stacks: _containers.RepeatedCompositeFieldContainer[TrainerStacks]
    hangs: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, hang: _Optional[_Union[Hang, _Mapping]] = ..., stacks: _Optional[_Iterable[_Union[TrainerStacks, _Mapping]]] = ..., hangs: _Optional[_Iterable[int]] = ...) -> None: ...

class GetWebhookKeyRequest(_message.Message):
    __slots__ = ("app_id",)
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    def __init__(self, app_id: _Optional[str] = ...) -> None: ...

class GetWebhookKeyResponse(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    def __init__(self, key: _Optional[str] = ...) -> None: ...

class CreateSavepointRequest(_message.Message):
    __slots__ = ("app_id", "timeout_seconds")
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    timeout_seconds: float
    def __init__(self, app_id: _Optional[str] = ..., timeout_seconds: _Optional[float] = ...) -> None: ...

class CreateSavepointResponse(_message.Message):
    __slots__ = ("savepoint",)
    SAVEPOINT_FIELD_NUMBER: _ClassVar[int]
    savepoint: str
    def __init__(self, savepoint: _Optional[str] = ...) -> None: ...

class ListSavepointsRequest(_message.Message):
    __slots__ = ("app_id",)
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    def __init__(self, app_id: _Optional[str] = ...) -> None: ...

class ListSavepointsResponse(_message.Message):
    __slots__ = ("savepoints",)
    SAVEPOINTS_FIELD_NUMBER: _ClassVar[int]
    savepoints: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, savepoints: _Optional[_Iterable[str]] = ...) -> None: ...
