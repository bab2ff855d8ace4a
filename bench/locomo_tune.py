"""Choosing the fusion weights on real conversations, by a rule written down first.

    python bench/locomo_eval.py --data PATH/locomo-dev5.json --dump /tmp/candidates.json
    python bench/locomo_tune.py --dump /tmp/candidates.json --today bench/results/locomo_eval_before.json

The dump holds, per question, every candidate the product's search scored
(its BM25 and cosine scores, its document and place) as the product computed
them; this script fuses them offline with `search.ordered_matches` for every point
of the grid below and applies the product's match rule and limit, so a grid
point's figures are what the product would serve with those weights.

The rule (leave one conversation out): for each conversation, the grid points
whose R@10 and nDCG@10 on the other conversations are, in every category, at
least today's (the `--today` run) are kept (all points, if none is), and the
one with the best nDCG@10 there is chosen (within 0.001, the higher R@10). The
held-out conversation is then scored with it: the mean over the folds is the
estimate of what the held-out half of LoCoMo will show. The product takes the
point most folds chose (a tie: the better nDCG@10 on all five).

With a dump made with --bm25-grid the same rule runs over the joint grid of
BM25's own parameters (locomo_eval.BM25_GRID: k1, b, the weight of a
fragment's own words against its context) and a narrower fusion grid
(JOINT_* below).

With --asking the same rule runs over how much a fragment that only asks is
lowered (Ranking.asking_weight, ASKING_WEIGHTS) jointly with a fusion grid
around the current point (ASKING_* below), on a dump that carries each
candidate's asking share (dumps made before it count every candidate as a
statement). Written down before the grid's figures were read: the rule above,
unchanged, and the same `--today` run (bench/results/locomo_eval_before.json).

With --hedged the same rule runs over the cosine weight of a question that
holds a word giving it its hypothetical form ("Would Melanie likely enjoy
Vivaldi?": search.QUESTION_FORM_WORDS), Ranking.hedged_vector_weight in
HEDGED_VECTOR_WEIGHTS (0.3 is "as any other question"), every other weight
the product's. Such a question asks for an inference, and its evidence rarely
shares its words. Written down before the grid's figures were read: the rule
above and the `--today` run unchanged; the dump is matched to the data file
(--data) question by question to read each question's text; besides the
overall held-out figures, each category's held-out figures are pooled over
the folds and printed, so a category the choice only fits shows there.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter, defaultdict
from itertools import product
from pathlib import Path

from common import write_results
from locomo_eval import scores as question_scores

K = 10
VECTOR_WEIGHTS = (0.2, 0.3, 0.4, 0.5, 0.6)
NEIGHBOUR_WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)
DOCUMENT_WEIGHTS = (0.0, 0.15, 0.3, 0.45)
TIE = 0.001
JOINT_VECTOR_WEIGHTS = (0.2, 0.3, 0.4)
JOINT_NEIGHBOUR_WEIGHTS = (0.25, 0.5)
JOINT_DOCUMENT_WEIGHTS = (0.3, 0.45)
ASKING_WEIGHTS = (0.0, 0.2, 0.3, 0.4, 0.5)
ASKING_VECTOR_WEIGHTS = (0.2, 0.3, 0.4)
ASKING_NEIGHBOUR_WEIGHTS = (0.5, 0.75, 1.0)
ASKING_DOCUMENT_WEIGHTS = (0.3, 0.45)
HEDGED_VECTOR_WEIGHTS = (0.3, 0.4, 0.5, 0.6, 0.7)


def per_question(questions: list[dict], ranking, bm25: str = "") -> list[dict]:  # type: ignore[no-untyped-def]
    """Each question's R@10 and nDCG@10 with `ranking` (and BM25's parameters
    `bm25`, from a --bm25-grid dump), as the product would serve it."""
    import uuid

    from memoryhub.services.search import Candidate, ordered_matches

    out = []
    for question in questions:
        scored = question["candidates_by_bm25"][bm25] if bm25 else question["candidates"]
        candidates = {uuid.UUID(c["id"]): Candidate(lexical_score=c["lexical"], vector_similarity=c["cosine"],
                                                    document=c["document"], position=c["position"],
                                                    asking=c.get("asking", 0.0))
                      for c in scored}
        dia = {uuid.UUID(c["id"]): c["dia"] for c in scored}
        ordered = [pk for pk, _, _ in ordered_matches(candidates, ranking, query=question.get("question", ""))]
        out.append({"conversation": question["conversation"], "category": question["category"],
                    **question_scores([dia[pk] for pk in ordered[:K]], question["evidence"])})
    return out


def aggregate(rows: list[dict]) -> dict[str, dict[str, float]]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        groups["all"].append(row)
        groups[f"c{row['category']}"].append(row)
    return {name: {key: statistics.fmean(r[key] for r in members) for key in ("r10", "ndcg")}
            for name, members in groups.items()}


def meets(figures: dict, today: dict) -> bool:
    return all(figures[name][key] >= today[name][key] - 1e-9 for name in today if name != "all" and name in figures
               for key in ("r10", "ndcg"))


def best(table: dict, points: list) -> tuple:  # type: ignore[type-arg]
    top = max(table[p]["all"]["ndcg"] for p in points)
    close = [p for p in points if table[p]["all"]["ndcg"] >= top - TIE]
    return max(close, key=lambda p: (table[p]["all"]["r10"], table[p]["all"]["ndcg"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dump", required=True, help="written by locomo_eval.py --dump")
    parser.add_argument("--today", required=True, help="a locomo_eval result of the ranking to beat")
    parser.add_argument("--asking", action="store_true", help="the asking grid (Ranking.asking_weight)")
    parser.add_argument("--hedged", action="store_true",
                        help="the grid of a hypothetical question's cosine weight (Ranking.hedged_vector_weight)")
    parser.add_argument("--data", default="", help="with --hedged: the LoCoMo file the dump was made from, "
                        "for each question's text")
    args = parser.parse_args()
    import django

    django.setup()
    from dataclasses import replace

    from memoryhub.services.search import RANKING

    questions = json.loads(Path(args.dump).read_text())
    if args.data:
        # Dumps made before they kept each question's text: the same order as the data file's.
        asked = [str(qa["question"]) for conversation in json.loads(Path(args.data).read_text())
                 for qa in conversation["questions"]]
        if len(asked) != len(questions):
            parser.error(f"--data holds {len(asked)} questions, the dump {len(questions)}")
        for question, text in zip(questions, asked, strict=True):
            question.setdefault("question", text)
    today = {name: row for name, row in json.loads(Path(args.today).read_text())["service"].items()}
    conversations = sorted({q["conversation"] for q in questions})
    settings = sorted(questions[0].get("candidates_by_bm25", {})) or [""]
    # The grid's axes; a point is (vector, neighbour, document, BM25 k1/b/own of a --bm25-grid dump or "",
    # asking).
    if args.hedged:
        name, axes = "locomo_tune_hedged", {
            "hedged": HEDGED_VECTOR_WEIGHTS, "vector": (RANKING.vector_weight,),
            "neighbour": (RANKING.neighbour_weight,), "document": (RANKING.document_weight,), "bm25": settings}
    elif args.asking:
        name, axes = "locomo_tune_asking", {
            "asking": ASKING_WEIGHTS, "vector": ASKING_VECTOR_WEIGHTS, "neighbour": ASKING_NEIGHBOUR_WEIGHTS,
            "document": ASKING_DOCUMENT_WEIGHTS, "bm25": settings}
    elif settings != [""]:
        name, axes = "locomo_tune_bm25", {
            "vector": JOINT_VECTOR_WEIGHTS, "neighbour": JOINT_NEIGHBOUR_WEIGHTS, "document": JOINT_DOCUMENT_WEIGHTS,
            "bm25": settings}
    else:
        name, axes = "locomo_tune", {
            "vector": VECTOR_WEIGHTS, "neighbour": NEIGHBOUR_WEIGHTS, "document": DOCUMENT_WEIGHTS, "bm25": settings}
    grid = [(v, n, d, bm25, a, h) for bm25 in axes["bm25"] for a in axes.get("asking", (RANKING.asking_weight,))
            for h in axes.get("hedged", (RANKING.hedged_vector_weight,))
            for v, n, d in product(axes["vector"], axes["neighbour"], axes["document"])]

    def ranking(point):  # type: ignore[no-untyped-def]
        vector, neighbour, document, _, asking, hedged = point
        return replace(RANKING, vector_weight=vector, lexical_weight=round(1 - vector, 2),
                       neighbour_weight=neighbour, document_weight=document, asking_weight=asking,
                       hedged_vector_weight=hedged)

    scored = {p: per_question(questions, ranking(p), p[3]) for p in grid}
    everything = {p: aggregate(rows) for p, rows in scored.items()}
    folds = []
    held_out_rows: list[dict] = []
    for held_out in conversations:
        table = {p: aggregate([r for r in rows if r["conversation"] != held_out]) for p, rows in scored.items()}
        allowed = [p for p in grid if meets(table[p], today)] or grid
        chosen = best(table, allowed)
        held_out_rows += [r for r in scored[chosen] if r["conversation"] == held_out]
        figures = aggregate([r for r in scored[chosen] if r["conversation"] == held_out])["all"]
        folds.append({"held_out": held_out, "chosen": chosen, "points_meeting_today": len(allowed),
                      "held_out_figures": figures})
        print(f"fold {held_out}: chose {chosen} ({len(allowed)} of {len(grid)} points meet today's categories); "
              f"held out R@10 {figures['r10']:.4f} nDCG {figures['ndcg']:.4f}")
    votes = Counter(fold["chosen"] for fold in folds)
    most = max(votes.values())
    product_point = max((p for p, n in votes.items() if n == most), key=lambda p: everything[p]["all"]["ndcg"])
    loco = {key: statistics.fmean(f["held_out_figures"][key] for f in folds) for key in ("r10", "ndcg")}
    pooled = aggregate(held_out_rows)
    print(f"chosen: vector {product_point[0]}, neighbour {product_point[1]}, document {product_point[2]}, "
          f"bm25 k1/b/own {product_point[3] or 'as dumped'}, asking {product_point[4]}, "
          f"hedged {product_point[5]}; "
          f"leave-one-out estimate R@10 {loco['r10']:.4f} nDCG {loco['ndcg']:.4f}")
    print("held out, each category pooled over the folds:",
          json.dumps({k: {m: round(v, 4) for m, v in row.items()} for k, row in sorted(pooled.items())}))
    print("on all five:", json.dumps({k: {m: round(v, 4) for m, v in row.items()}
                                      for k, row in everything[product_point].items()}))
    write_results(name, {
        "grid": axes,
        "folds": [{**f, "chosen": list(f["chosen"])} for f in folds],
        "chosen": list(product_point), "leave_one_out": loco, "held_out_pooled": pooled,
        "all_five": {str(list(p)): everything[p] for p in grid},
    })


if __name__ == "__main__":
    main()
