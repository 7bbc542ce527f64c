"""`mlxr serve` driven by the official `openai` Python client in strict
mode (every response validated against the SDK's models), on the real
SmolLM2-135M-Instruct fixture: models, chat (plain and streamed, with the
SDK's stream helpers and accumulators), legacy completions, the Responses
API, usage equal to the token counts, context overflow, and a 400 naming
the parameter for every feature the server cannot honour."""
import json
import subprocess
import tempfile
import time

import openai
import pytest

from serve_util import MLXR, Server, error_of, request

Q = "What is the capital of France?"


@pytest.fixture(scope="module")
def smol_path(fixture_model):
    return fixture_model("smollm2")["path"]


@pytest.fixture(scope="module")
def server(smol_path):
    s = Server(smol_path)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key="sk-anything", max_retries=0,
                         _strict_response_validation=True, timeout=120)


def chat(client, content=Q, **kw):
    kw.setdefault("temperature", 0)
    kw.setdefault("max_tokens", 40)
    return client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": content}], **kw)


def tokenize(server, text, special=True):
    st, _, body = request(server.port, "POST", "/tokenize", {"content": text, "parse_special": special})
    assert st == 200, body
    return json.loads(body)["tokens"]


def test_health_and_models(server, client):
    st, _, body = request(server.port, "GET", "/health")
    assert st == 200 and json.loads(body) == {"status": "ok"}
    models = client.models.list()
    assert len(models.data) == 1
    m = models.data[0]
    assert m.object == "model" and m.owned_by == "mlxr"
    assert m.model_extra["context_length"] == 4096
    assert client.models.retrieve(m.id).id == m.id


def test_chat_answers(client):
    r = chat(client)
    assert r.object == "chat.completion"
    assert "Paris" in r.choices[0].message.content
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_usage_equals_token_counts(server, client, smol_path):
    msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": Q}]
    r = client.chat.completions.create(model="m", messages=msgs, temperature=0, max_tokens=3)
    # The prompt, rendered by mlxr's own template code, then tokenized.
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(msgs, f)
        f.flush()
        rendered = subprocess.run([MLXR, "chat-render", f"{smol_path}/tokenizer_config.json", f.name],
                                  capture_output=True, text=True, check=True).stdout
    assert r.usage.prompt_tokens == len(tokenize(server, rendered))
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 3
    assert len(tokenize(server, r.choices[0].message.content, special=False)) == 3


def test_chat_stream_equals_non_streaming(client):
    full = chat(client).choices[0].message.content
    chunks = list(chat(client, stream=True, stream_options={"include_usage": True}))
    ids = {c.id for c in chunks}
    created = {c.created for c in chunks}
    assert len(ids) == 1 and len(created) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.choices[0].delta.role is None for c in chunks[1:] if c.choices)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full
    final = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(final) == 1 and final[0].choices[0].finish_reason == "stop"
    assert final[0].choices[0].delta.content is None
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    assert all(c.usage is None for c in chunks[:-1])


def test_chat_stream_helper_accumulates(client):
    full = chat(client).choices[0].message.content
    with client.chat.completions.stream(model="m", messages=[{"role": "user", "content": Q}], temperature=0,
                                        max_tokens=40, stream_options={"include_usage": True}) as st:
        deltas = [e.delta for e in st if e.type == "content.delta"]
        done = st.get_final_completion()
    assert "".join(deltas) == full
    assert done.choices[0].message.content == full
    assert done.usage.completion_tokens > 0


def test_stream_without_usage_has_no_usage_field(server):
    st, h, body = request(server.port, "POST", "/v1/chat/completions",
                          {"messages": [{"role": "user", "content": Q}], "temperature": 0, "max_tokens": 3,
                           "stream": True})
    assert st == 200 and h["content-type"] == "text/event-stream"
    events = [e for e in body.decode().split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    for e in events[:-1]:
        assert "usage" not in json.loads(e[len("data: "):])


def test_content_parts_and_developer_role(client):
    r = client.chat.completions.create(
        model="m", temperature=0, max_tokens=20,
        messages=[{"role": "developer", "content": [{"type": "text", "text": "Answer in one word."}]},
                  {"role": "user", "content": [{"type": "text", "text": Q}]}])
    assert r.choices[0].message.content


def test_same_seed_same_answer(client):
    a = chat(client, temperature=1.0, seed=7, max_tokens=16, content="Once upon a time")
    b = chat(client, temperature=1.0, seed=7, max_tokens=16, content="Once upon a time")
    assert a.choices[0].message.content == b.choices[0].message.content


def test_top_p_zero_is_greedy(client):
    """top_p 0 keeps only the most probable token (greedy, as llama.cpp
    reads it and OpenAI clients expect): at temperature 1.5 with seeds that
    do draw other text without it, the answer is temperature 0's, on chat,
    legacy completions and the Responses API."""
    story = "Once upon a time"
    greedy = chat(client, max_tokens=24, content=story).choices[0].message.content
    drawn = set()
    for seed in (1, 2, 3):
        r = chat(client, temperature=1.5, top_p=0, seed=seed, max_tokens=24, content=story)
        assert r.choices[0].message.content == greedy, seed
        drawn.add(chat(client, temperature=1.5, seed=seed, max_tokens=24, content=story).choices[0].message.content)
    assert drawn - {greedy}, "temperature 1.5 without top_p 0 gave the greedy text for every seed"
    c0 = client.completions.create(model="m", prompt=story, temperature=0, max_tokens=12)
    c1 = client.completions.create(model="m", prompt=story, temperature=1.5, top_p=0, seed=4, max_tokens=12)
    assert c1.choices[0].text == c0.choices[0].text
    r0 = client.responses.create(model="m", input=story, temperature=0, max_output_tokens=12)
    r1 = client.responses.create(model="m", input=story, temperature=1.5, top_p=0, max_output_tokens=12)
    assert r1.output_text == r0.output_text and r1.top_p == 0


@pytest.mark.parametrize("top_p", [1.5, -0.1])
def test_top_p_outside_0_1_is_400_naming_top_p(server, client, top_p):
    for call in (lambda: chat(client, top_p=top_p, max_tokens=2),
                 lambda: client.completions.create(model="m", prompt="hi", top_p=top_p, max_tokens=2)):
        with pytest.raises(openai.BadRequestError) as ei:
            call()
        assert ei.value.status_code == 400
        assert ei.value.body["param"] == "top_p" and "top_p" in ei.value.body["message"], ei.value.body
    # JSON has no NaN or infinity; 1e999 is the one way to send one (+inf).
    body = b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "top_p": 1e999}'
    st, _, data = request(server.port, "POST", "/v1/chat/completions", body)
    assert st == 400 and error_of(data)["param"] == "top_p", data


def test_stop_string(client):
    full = chat(client).choices[0].message.content
    assert "Paris" in full
    cut = chat(client, stop=["Paris"]).choices[0].message.content
    assert "Paris" not in cut and full.startswith(cut)


def test_completions_usage_and_stream(server, client):
    prompt = "The capital of France is"
    r = client.completions.create(model="m", prompt=prompt, temperature=0, max_tokens=6)
    assert r.object == "text_completion"
    assert r.usage.prompt_tokens == len(tokenize(server, prompt))
    assert r.usage.completion_tokens == 6 and r.choices[0].finish_reason == "length"
    # Streamed legacy completions carry "finish_reason": null until the
    # last chunk, as OpenAI's do; the SDK's Completion model declares it
    # non-null, so this one stream is read without strict validation.
    loose = openai.OpenAI(base_url=server.base + "/v1", api_key="x", max_retries=0)
    parts = list(loose.completions.create(model="m", prompt=prompt, temperature=0, max_tokens=6, stream=True))
    assert "".join(p.choices[0].text for p in parts) == r.choices[0].text
    assert [p.choices[0].finish_reason for p in parts] == [None] * (len(parts) - 1) + ["length"]
    assert len({p.id for p in parts}) == 1


def test_completions_parse_special_tokens(server, client):
    # By design the legacy endpoint reads control tokens in the prompt.
    prompt = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    r = client.completions.create(model="m", prompt=prompt, temperature=0, max_tokens=20)
    assert r.usage.prompt_tokens == len(tokenize(server, prompt, special=True))
    assert r.usage.prompt_tokens < len(tokenize(server, prompt, special=False))
    assert "Paris" in r.choices[0].text


def test_responses_plain_and_streamed(client):
    r = client.responses.create(model="m", input=Q, instructions="Be brief.", temperature=0, max_output_tokens=40)
    assert r.status == "completed" and "Paris" in r.output_text
    assert r.usage.output_tokens > 0 and r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    with client.responses.stream(model="m", input=Q, instructions="Be brief.", temperature=0,
                                 max_output_tokens=40) as st:
        events = list(st)
        final = st.get_final_response()
    types = [e.type for e in events]
    head = ["response.created", "response.in_progress", "response.output_item.added",
            "response.content_part.added"]
    tail = ["response.output_text.done", "response.content_part.done", "response.output_item.done",
            "response.completed"]
    assert types[:4] == head and types[-4:] == tail
    assert set(types[4:-4]) == {"response.output_text.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == r.output_text
    assert final.output_text == r.output_text
    assert final.usage.input_tokens == r.usage.input_tokens
    assert final.usage.output_tokens == r.usage.output_tokens


def test_responses_message_items(client):
    r = client.responses.create(model="m", temperature=0, max_output_tokens=20, input=[
        {"role": "system", "content": "Answer in one word."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": Q}]}])
    assert r.output_text


def test_tokenize_detokenize(server):
    ids = tokenize(server, "Hello world")
    st, _, body = request(server.port, "POST", "/detokenize", {"tokens": ids})
    assert st == 200 and json.loads(body)["content"] == "Hello world"
    st, _, body = request(server.port, "POST", "/tokenize", {"content": "Hello", "with_pieces": True})
    assert json.loads(body)["tokens"][0]["piece"] == "Hello"
    st, _, body = request(server.port, "POST", "/detokenize", {"tokens": [10 ** 9]})
    assert st == 400


def test_unknown_fields_are_ignored(client):
    r = chat(client, max_tokens=3, extra_body={"some_future_field": {"x": 1}, "user": "u"})
    assert r.choices[0].message.content


def test_prompt_longer_than_context_is_400(client):
    long = "word " * 5000
    with pytest.raises(openai.BadRequestError) as ei:
        chat(client, content=long)
    e = ei.value.body
    assert e["type"] == "exceed_context_size_error"
    assert e["n_ctx"] == 4096 and e["n_prompt_tokens"] > 4096
    with pytest.raises(openai.BadRequestError) as ei:
        client.completions.create(model="m", prompt=long, max_tokens=5)
    assert ei.value.body["type"] == "exceed_context_size_error"
    with pytest.raises(openai.BadRequestError) as ei:
        chat(client, content=long, stream=True)
    assert ei.value.body["type"] == "exceed_context_size_error"


UNSUPPORTED = [
    ("response_format", {"response_format": {"type": "json_object"}}),
    ("response_format", {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}}),
    ("logprobs", {"logprobs": True}),
    ("top_logprobs", {"top_logprobs": 2}),
    ("n", {"n": 2}),
    ("tools", {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}),
    ("tool_choice", {"tool_choice": "required"}),
    ("audio", {"audio": {"voice": "alloy", "format": "wav"}}),
    ("modalities", {"modalities": ["text", "audio"]}),
    ("logit_bias", {"logit_bias": {"1": 5}}),
    ("web_search_options", {"web_search_options": {}}),
]


@pytest.mark.parametrize("param,extra", UNSUPPORTED, ids=[f"{p}-{i}" for i, (p, _) in enumerate(UNSUPPORTED)])
def test_unsupported_chat_feature_is_400(client, param, extra):
    with pytest.raises(openai.BadRequestError) as ei:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                       extra_body=extra)
    assert ei.value.status_code == 400
    assert ei.value.body["param"] == param
    assert ei.value.body["type"] == "invalid_request_error"


PARTS = [
    ("messages[0].content[1]", {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}),
    ("messages[0].content[1]", {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}),
    ("messages[0].content[1]", {"type": "file", "file": {"file_id": "x"}}),
]


@pytest.mark.parametrize("param,part", PARTS, ids=["image", "audio", "file"])
def test_non_text_parts_are_400(client, param, part):
    with pytest.raises(openai.BadRequestError) as ei:
        client.chat.completions.create(model="m", max_tokens=2, messages=[
            {"role": "user", "content": [{"type": "text", "text": "what is this?"}, part]}])
    assert ei.value.body["param"] == param


def test_tool_role_and_responses_builtin_tools_are_400(client):
    with pytest.raises(openai.BadRequestError) as ei:
        client.chat.completions.create(model="m", max_tokens=2, messages=[
            {"role": "user", "content": "hi"}, {"role": "tool", "content": "x", "tool_call_id": "1"}])
    assert ei.value.body["param"] == "messages[1].role"
    with pytest.raises(openai.BadRequestError) as ei:
        client.responses.create(model="m", input="hi", tools=[{"type": "web_search"}])
    assert ei.value.body["param"] == "tools"
    with pytest.raises(openai.BadRequestError) as ei:
        client.responses.create(model="m", input="hi", text={"format": {"type": "json_object"}})
    assert ei.value.body["param"] == "text.format"
    with pytest.raises(openai.BadRequestError) as ei:
        client.completions.create(model="m", prompt="hi", max_tokens=2, logprobs=2)
    assert ei.value.body["param"] == "logprobs"


BAD_VALUES = [
    ("temperature", {"temperature": 3}),
    ("top_p", {"top_p": -0.1}),
    ("max_tokens", {"max_tokens": 0}),
    ("max_tokens", {"max_tokens": "ten"}),
    ("stop", {"stop": [""]}),
    ("stop", {"stop": ["a"] * 9}),
    ("seed", {"seed": 1.5}),
    ("messages", {"messages": []}),
    ("messages[0].role", {"messages": [{"role": "wizard", "content": "hi"}]}),
    ("messages[0].content", {"messages": [{"role": "user"}]}),
    ("stream_options", {"stream_options": {"include_usage": True}}),
]


@pytest.mark.parametrize("param,body", BAD_VALUES, ids=[f"{p}-{i}" for i, (p, _) in enumerate(BAD_VALUES)])
def test_invalid_values_are_400_naming_the_parameter(server, param, body):
    b = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    b.update(body)
    st, _, data = request(server.port, "POST", "/v1/chat/completions", b)
    assert st == 400, data
    assert error_of(data)["param"] == param


def test_malformed_json_is_400(server):
    for body in (b"{", b"[]", b'{"messages": [}', b"\xff\xfe", b'{"a":1,"a":2}'):
        st, _, data = request(server.port, "POST", "/v1/chat/completions", body)
        assert st == 400, (body, data)
        error_of(data)


def test_request_log_has_no_prompt_text(server, client):
    n = server.text().count("POST /v1/chat/completions 200 prompt_tokens=")
    chat(client, content="The secret word is xylophone-42. What is it?", max_tokens=2)
    # The line is written once the answer is out: wait for this request's.
    deadline = time.time() + 60
    while server.text().count("POST /v1/chat/completions 200 prompt_tokens=") <= n:
        assert time.time() < deadline, server.text()[-3000:]
        time.sleep(0.05)
    assert "xylophone-42" not in server.text()


def test_long_prefill_sends_sse_comments(server, client):
    body = {"messages": [{"role": "user", "content": "word " * 400}], "max_tokens": 2, "stream": True,
            "temperature": 0}
    st, _, data = request(server.port, "POST", "/v1/chat/completions", body)
    assert st == 200
    events = [e for e in data.decode().split("\n\n") if e]
    assert any(e.startswith(": prefill ") for e in events), events[:3]
    # The official client skips the comments.
    chunks = list(client.chat.completions.create(model="m", **body))
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
