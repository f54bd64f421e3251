"""Per-request check of a run directory's records.jsonl against llama.cpp's own per-response
`timings`: usage cached_tokens == timings.cache_n, and usage prompt_tokens == timings.cache_n +
timings.prompt_n; plus generated tokens == timings.predicted_n.

    python check_records.py RUN_DIR
"""

import json
import sys
from pathlib import Path


def main(run: str) -> None:
    lines = (Path(run) / "records.jsonl").read_text().splitlines()
    # TurnRecords only: format-2 files also hold header, nonces and window lines ("kind")
    recs = [r for r in (json.loads(line) for line in lines if line) if "kind" not in r]
    for phase, keep in (("measured", False), ("warm-up", True)):
        rs = [r for r in recs if bool(r.get("warmup")) == keep]
        timed = [r for r in rs if isinstance(r.get("timings"), dict)]
        cache_eq = [r for r in timed if r.get("cached_tokens") == r["timings"].get("cache_n")]
        prompt_eq = [
            r
            for r in timed
            if r.get("prompt_tokens")
            == (r["timings"].get("cache_n") or 0) + (r["timings"].get("prompt_n") or 0)
        ]
        gen_eq = [r for r in timed if r.get("completion_tokens") == r["timings"].get("predicted_n")]
        ok = [r for r in rs if r.get("status") == "ok"]
        print(
            f"{phase}: {len(rs)} records, {len(ok)} ok, {len(timed)} with timings; "
            f"cached_tokens == timings.cache_n: {len(cache_eq)}/{len(timed)}; "
            f"prompt_tokens == cache_n + prompt_n: {len(prompt_eq)}/{len(timed)}; "
            f"completion_tokens == predicted_n: {len(gen_eq)}/{len(timed)}"
        )
        for r in [r for r in timed if r not in cache_eq][:5]:
            print(
                f"  mismatch rep {r.get('repetition')} session {r.get('session')} turn "
                f"{r.get('turn')}: cached_tokens {r.get('cached_tokens')} vs cache_n "
                f"{r['timings'].get('cache_n')}"
            )
        errs = {}
        for r in rs:
            if r.get("status") != "ok":
                k = f"{r.get('status')}/{r.get('error_kind')}/{r.get('finish_reason')}"
                errs[k] = errs.get(k, 0) + 1
        if errs:
            print(f"  not ok: {errs}")
        if timed and phase == "measured":
            tp = [r["timings"].get("prompt_per_second") for r in timed]
            tg = [r["timings"].get("predicted_per_second") for r in timed]
            tp = sorted(x for x in tp if x)
            tg = sorted(x for x in tg if x)
            if tp and tg:
                print(
                    "  llama.cpp timings, measured: prompt_per_second median "
                    f"{tp[len(tp) // 2]:,.0f}"
                    f" (min {tp[0]:,.0f}, max {tp[-1]:,.0f}); predicted_per_second median "
                    f"{tg[len(tg) // 2]:,.1f} (min {tg[0]:,.1f}, max {tg[-1]:,.1f})"
                )


if __name__ == "__main__":
    main(sys.argv[1])
