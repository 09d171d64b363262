import pytest

from gles_delegate.gpu import context as gl


def _pending_errors():
    errors = []
    for context, _ in list(gl._shared.values()):
        if context.ctx is not None:
            with context.current() as ctx:
                error = ctx.error
            if error != "GL_NO_ERROR":
                errors.append(f"{context.renderer}: {error}")
    return errors


@pytest.fixture(scope="session", autouse=True)
def shared_context():
    """Keep the process's GL context (and its compiled programs) alive across tests."""
    context = gl.acquire_shared()
    yield context
    gl.release_shared(context)


@pytest.fixture(autouse=True)
def no_gl_errors():
    """Fail a test that leaves (or finds) a GL error pending, as moderngl's own tests do."""
    before = _pending_errors()
    assert not before, f"GL error pending before the test: {before}"
    yield
    after = _pending_errors()
    assert not after, f"GL error pending after the test: {after}"
