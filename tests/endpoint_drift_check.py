"""How often re-rendering an agent's echoed history (what a plain OpenAI server does) changes the
ids the engine generated, against how often the endpoint had to break a prefix: the tiny model,
20 sessions x 3 turns of tests/test_openai_endpoint.py's scripted agent (docs/agents.md).

    PYTHONPATH=$PWD:$PWD/tests python tests/endpoint_drift_check.py
"""

import asyncio

from test_manager_support import tiny_model_dir, tiny_tokenizer
from test_openai_endpoint import _scripted_agent

from gspo_agents.rollout.local_engine import LocalEngine
from gspo_agents.rollout.openai_endpoint import OpenAIEndpoint, serve_endpoint


async def main():
    eng = LocalEngine(tiny_model_dir(), max_batch_size=16, seed=0)
    tok = tiny_tokenizer()
    ep = OpenAIEndpoint(eng, tok)
    drift = turns = breaks = 0
    async with serve_endpoint(ep) as url:
        for i in range(20):
            replies = await _scripted_agent(url, f"m{i}", turns=3)
            s = ep.pop_session(f"m{i}")
            breaks += s.prefix_breaks
            # re-render the whole echoed history before the last call
            msgs = [
                {"role": "system", "content": "You count."},
                {"role": "user", "content": "Say a number."},
            ]
            for t, r in enumerate(replies):
                msgs.append({"role": "assistant", "content": r.choices[0].message.content})
                msgs.append({"role": "user", "content": f"And another ({t})."})
                if t + 1 < len(replies):
                    turns += 1
                    naive = ep.chat.prompt_ids(msgs)
                    drift += naive != replies[t + 1].model_extra["prompt_token_ids"]
    await eng.close()
    print(f"sessions=20 later_turns={turns} prefix_breaks={breaks} naive_rerender_differs={drift}")


asyncio.run(main())
