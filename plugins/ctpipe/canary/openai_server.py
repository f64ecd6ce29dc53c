"""A minimal OpenAI-compatible chat server on transformers: the local fallback when vLLM cannot run.

    python -m ctpipe.canary.openai_server --model DIR --port P --served-model-name NAME

It answers ``POST /v1/chat/completions`` (non-streaming), ``GET /v1/models`` and ``GET /health``
like vLLM's server, and exports the same Prometheus histograms and counters under the same names
(``vllm:e2e_request_latency_seconds``, ``vllm:time_to_first_token_seconds``,
``vllm:request_success_total``, ...) so canary analysis reads either server the same way.
Requests are generated one at a time: it is for a tiny model on a laptop, not for throughput.
"""

# No `from __future__ import annotations`: FastAPI must see the request model, defined in build_app, as a class.
import argparse
import threading
import time
import uuid

# vLLM's own bucket bounds (vllm/v1/metrics/loggers.py), so both servers' histograms line up.
_E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)


def build_app(model_dir: str, served_name: str):
    import torch
    from fastapi import FastAPI, HTTPException
    from fastapi.responses import PlainTextResponse
    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
    from pydantic import BaseModel, ConfigDict, Field
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.generation.streamers import BaseStreamer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    lock = threading.Lock()  # one generate at a time: the model is not re-entrant

    metrics = CollectorRegistry()
    labels = ["model_name"]
    e2e = Histogram("vllm:e2e_request_latency_seconds", "End to end request latency.", labels,
                    buckets=_E2E_BUCKETS, registry=metrics)
    ttft = Histogram("vllm:time_to_first_token_seconds", "Time to first token.", labels,
                     buckets=_TTFT_BUCKETS, registry=metrics)
    success = Counter("vllm:request_success", "Finished requests.", labels + ["finished_reason"], registry=metrics)
    prompt_tokens = Counter("vllm:prompt_tokens", "Prefill tokens processed.", labels, registry=metrics)
    generation_tokens = Counter("vllm:generation_tokens", "Generation tokens processed.", labels, registry=metrics)

    class Message(BaseModel):
        model_config = ConfigDict(extra="allow")
        role: str
        content: str

    class ChatRequest(BaseModel):
        model_config = ConfigDict(extra="allow")  # OpenAI clients send many optional fields
        model: str
        messages: list[Message] = Field(min_length=1)
        max_tokens: int | None = Field(None, ge=1)
        max_completion_tokens: int | None = Field(None, ge=1)
        temperature: float = Field(1.0, ge=0)
        seed: int | None = None

    class FirstToken(BaseStreamer):
        """Notes when the first generated token arrives (the first ``put`` is the prompt)."""

        def __init__(self):
            self.calls, self.at = 0, None

        def put(self, value):
            self.calls += 1
            if self.calls == 2:
                self.at = time.monotonic()

        def end(self):
            pass

    app = FastAPI(title="ctpipe OpenAI-compatible server")

    @app.get("/health")
    def health():
        return {}

    @app.get("/metrics", response_class=PlainTextResponse)
    def prometheus():
        return generate_latest(metrics).decode()

    @app.get("/v1/models")
    def models():
        return {"object": "list", "data": [{"id": served_name, "object": "model", "owned_by": "ctpipe"}]}

    @app.post("/v1/chat/completions")
    def chat(req: ChatRequest):
        if req.model != served_name:
            raise HTTPException(404, f"The model `{req.model}` does not exist.")
        t0 = time.monotonic()
        text = tokenizer.apply_chat_template([m.model_dump() for m in req.messages], tokenize=False,
                                             add_generation_prompt=True)
        enc = tokenizer(text, return_tensors="pt", add_special_tokens=False)
        budget = req.max_completion_tokens or req.max_tokens or 16
        kwargs = {"max_new_tokens": budget, "pad_token_id": tokenizer.pad_token_id}
        if req.temperature > 0:
            kwargs |= {"do_sample": True, "temperature": req.temperature, "top_k": 0, "top_p": 1.0}
        else:
            kwargs |= {"do_sample": False}
        first = FirstToken()
        with lock, torch.inference_mode():
            if req.seed is not None:
                torch.manual_seed(req.seed)
            ids = model.generate(**enc, streamer=first, **kwargs)
        new = ids[0, enc["input_ids"].shape[1]:]
        done = time.monotonic()
        reason = "length" if len(new) >= budget and new[-1] != tokenizer.eos_token_id else "stop"
        n_prompt, n_out = int(enc["input_ids"].shape[1]), int(len(new))
        e2e.labels(served_name).observe(done - t0)
        ttft.labels(served_name).observe((first.at or done) - t0)
        success.labels(served_name, reason).inc()
        prompt_tokens.labels(served_name).inc(n_prompt)
        generation_tokens.labels(served_name).inc(n_out)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": served_name,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": tokenizer.decode(new, skip_special_tokens=True)},
                "finish_reason": reason,
            }],
            "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out},
        }

    return app


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="a Hugging Face model directory")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--served-model-name", required=True)
    args = p.parse_args(argv)
    uvicorn.run(build_app(args.model, args.served_model_name), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
