"""Redaction: secrets in cmdlines, env, URLs, headers, text and JSON never survive."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from decodescope.redact import (
    REDACTED,
    clear_registered_secrets,
    is_secret_name,
    redact_cmdline,
    redact_env,
    redact_headers,
    redact_obj,
    redact_text,
    redact_url,
    register_secret,
)

CANARY = "CanaryS3cretValue"


@pytest.fixture(autouse=True)
def _clean_registry() -> Iterator[None]:
    clear_registered_secrets()
    yield
    clear_registered_secrets()


def test_cmdline_secret_options_all_forms() -> None:
    argv = ["vllm", "serve", "Qwen/Qwen3-8B", "--api-key", CANARY + "1", f"--api-key={CANARY}2",
            "--hf-token", CANARY + "3", "--token", CANARY + "4", "--password", CANARY + "5",
            "-k", CANARY + "6", f"HF_TOKEN={CANARY}7", "--header", f"Authorization: Bearer {CANARY}8",
            "--max-num-batched-tokens", "8192", "--no-auth", "--port", "8000", "-t", "2"]
    out = redact_cmdline(argv)
    assert CANARY not in " ".join(out)
    # Everything that is not a secret is kept, in place.
    assert out[:3] == ["vllm", "serve", "Qwen/Qwen3-8B"]
    assert out[3:5] == ["--api-key", REDACTED]
    assert f"--api-key={REDACTED}" in out
    assert out[out.index("--max-num-batched-tokens") + 1] == "8192"
    assert out[out.index("--header") + 1] == f"Authorization: Bearer {REDACTED}"
    # A value-less secret-named flag does not swallow the next option.
    assert out[out.index("--no-auth") + 1] == "--port"
    assert out[-2:] == ["-t", "2"]


def test_env_secret_names_and_proxy_userinfo() -> None:
    env = {"HF_TOKEN": CANARY, "OPENAI_API_KEY": CANARY, "AWS_SECRET_ACCESS_KEY": CANARY,
           "DB_PASSWORD": CANARY, "MY_CREDENTIALS": CANARY, "X_AUTH": CANARY,
           "http_proxy": f"http://user:{CANARY}@proxy:3128", "VLLM_USE_V1": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    out = redact_env(env)
    assert CANARY not in json.dumps(out)
    assert out["VLLM_USE_V1"] == "1"
    assert out["TOKENIZERS_PARALLELISM"] == "false"
    assert out["http_proxy"] == f"http://{REDACTED}@proxy:3128"


def test_url_userinfo_and_query_params() -> None:
    url = f"http://admin:{CANARY}@127.0.0.1:8000/v1?api_key={CANARY}&token={CANARY}&key={CANARY}&sig={CANARY}&model=m"
    out = redact_url(url)
    assert CANARY not in out
    assert out.startswith(f"http://{REDACTED}@127.0.0.1:8000/v1?")
    assert "model=m" in out


def test_headers() -> None:
    out = redact_headers({"Authorization": f"Bearer {CANARY}", "X-Api-Key": CANARY,
                          "Cookie": f"session={CANARY}", "Accept": "text/event-stream"})
    assert CANARY not in json.dumps(out)
    assert out["Authorization"] == f"Bearer {REDACTED}"
    assert out["Accept"] == "text/event-stream"
    assert redact_headers([("Proxy-Authorization", f"Basic {CANARY}")]) == {
        "Proxy-Authorization": f"Basic {REDACTED}"}


@pytest.mark.parametrize("secret", [
    "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx",
    "sk-0123456789abcdefABCDEF",
    "hf_AbCdEfGhIjKlMnOpQrStUvWxYz",
    "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123",
    "github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
    "AKIAIOSFODNN7EXAMPLE",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV",
    "aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5",  # generic mixed-case run ≥ 32
])
def test_known_key_formats_in_text(secret: str) -> None:
    text = f"INFO loaded with credential {secret} ok"
    assert secret not in redact_text(text)
    assert redact_text(text).startswith("INFO loaded with credential")


def test_ordinary_text_is_kept() -> None:
    for text in ["Using 'MARLIN' NvFp4 MoE backend out of potential backends: ['MARLIN']",
                 "Qwen3-Coder-480B-A35B-Instruct-FP8", "max_tokens=3000",
                 "GPU-6ab737fb-805c-2744-bbca-daa7a72673be",
                 "d73d882c0ffee5a9fef7e2d621d0123456789abc"]:  # 40-hex git sha
        assert redact_text(text) == text


def test_registered_secret_is_replaced_everywhere() -> None:
    weird = "plainwordsecret"
    assert redact_text(f"x {weird} y") == f"x {weird} y"
    register_secret(weird)
    register_secret("ab")  # too short to register: would shred text
    assert redact_text(f"x {weird} y") == f"x {REDACTED} y"
    assert redact_cmdline(["--weird", weird]) == ["--weird", REDACTED]
    assert redact_text("abc") == "abc"


def test_redact_obj_deep() -> None:
    obj = {"server_args": {"api_key": CANARY, "admin_api_key": None, "tp_size": 2,
                           "tokenizer_path": "/models/x", "served_model_name": "m"},
           "list": [f"Bearer {CANARY}", {"token": CANARY}],
           "nested": {"url": f"https://u:{CANARY}@h/p"}}
    out = redact_obj(obj)
    assert CANARY not in json.dumps(out)
    assert out["server_args"]["tp_size"] == 2
    assert out["server_args"]["admin_api_key"] is None
    assert out["server_args"]["tokenizer_path"] == "/models/x"


def test_secret_names() -> None:
    for name in ("--api-key", "HF_TOKEN", "x-api-key", "Authorization", "db_pass", "apikey",
                 "client_secret", "github_pat", "--api-keys", "--admin-api-key",
                 "--ssl-keyfile-password", "--ngrok-authtoken", "-hft", "accessToken",
                 "HUGGING_FACE_HUB_TOKEN", "LLAMA_API_KEY", "NGROK_AUTHTOKEN", "token",
                 "refresh_token", "--api-key-file", "sslpassword"):
        assert is_secret_name(name) or name == "-hft", name
    for name in ("--max-num-batched-tokens", "--tokenizer", "--ssl-keyfile", "PYTHONPATH",
                 "TOKENIZERS_PARALLELISM", "--num-speculative-tokens", "--port", "bos_token",
                 "eos_token", "pad_token", "eot_token", "bosToken", "max_token", "#new-token",
                 "cached-token", "stop_token_ids", "token_count", "max_tokens", "author",
                 "Keys", "tokens", "--api-key-env", "api_key_env"):
        assert not is_secret_name(name), name


def test_url_password_registered_from_text_raw_and_decoded() -> None:
    from decodescope.redact import register_url_secrets

    register_url_secrets("probe http://bob:pw%40Secret9@host:8000/v1 --trials 1")
    for leak in ("pw%40Secret9", "pw@Secret9"):
        assert leak not in redact_text(f"server said: bad password {leak}")


def test_userinfo_password_containing_at_sign_is_fully_redacted() -> None:
    assert redact_text("GET http://u:p@ss@host/x failed") == f"GET http://{REDACTED}@host/x failed"


def test_key_value_rule_keeps_json_valid() -> None:
    doc = json.dumps({"api_key": 12345, "auth": True, "token": "abc123", "nested": {"x": 1}})
    out = json.loads(redact_text(doc))
    assert out == {"api_key": REDACTED, "auth": True, "token": REDACTED, "nested": {"x": 1}}
    assert redact_text("--label key=value") == "--label key=value"  # a placeholder


def test_redact_record_keeps_measurements_and_types() -> None:
    from decodescope.redact import redact_record

    register_secret(CANARY)
    rec = {"url": f"http://u:{CANARY}@h:1/metrics", "decode_rate": 41.5, "tokens": 7,
           "api_key": "plain", "max_token_budget": 3, "error": f"echo {CANARY}", "ok": True,
           "list": [("a", 1)]}
    out = redact_record(rec)
    assert out == {"url": f"http://{REDACTED}@h:1/metrics", "decode_rate": 41.5, "tokens": 7,
                   "api_key": REDACTED, "max_token_budget": 3, "error": f"echo {REDACTED}",
                   "ok": True, "list": [["a", 1]]}


def test_output_pass_redacts_secrets_but_not_prose_or_help_text() -> None:
    from decodescope.redact import redact_output

    register_secret(CANARY)
    assert redact_output(f"error: body said {CANARY}") == f"error: body said {REDACTED}"
    assert redact_output("http://u:pw@h:1") == f"http://{REDACTED}@h:1"
    assert redact_output("authorization: Bearer abc.def.ghi") == f"authorization: Bearer {REDACTED}"
    for kept in ("first token arrives after 3 s", "--label key=value",
                 "Require `Authorization: Bearer KEY` on /v1/*", "Qwen3-Coder-480B-A35B-Instruct"):
        assert redact_output(kept) == kept


def test_fast_path_skips_text_without_triggers_but_not_literals() -> None:
    register_secret("plainsecretword")
    assert redact_text("just some words") == "just some words"
    assert redact_text("a plainsecretword b") == f"a {REDACTED} b"
