from common.buffer import AgentBuffer


def test_buffer_imports() -> None:
    assert AgentBuffer().num_experiences == 0
