"""The ML-Agents protocol gateway (``stepstream unity``): unmodified Unity builds and the Editor as env clients.

``translate`` turns Unity's messages into BrainInfos and actions back (no gRPC), ``side_channels``
frames the engine-configuration, environment-parameters and stats channels, ``gateway`` is the gRPC
server Unity calls, ``metrics`` its Prometheus collector.
"""

from envclient.unity.gateway import DEFAULT_UNITY_PORT, GatewayServer, GatewaySettings, UnityGateway
from envclient.unity.side_channels import EngineSettings, UnitySettings

__all__ = ["DEFAULT_UNITY_PORT", "EngineSettings", "GatewayServer", "GatewaySettings", "UnityGateway", "UnitySettings"]
