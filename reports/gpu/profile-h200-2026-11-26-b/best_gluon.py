"""Best correct Gluon genome (by GPU median) of one problem in a run's store: its genes as JSON on stdout."""
import glob, json, sqlite3, sys
run, key = sys.argv[1], sys.argv[2]
best = None
for path in glob.glob(f"{run}/**/store.sqlite", recursive=True):
    db = sqlite3.connect(path)
    for genome, ms in db.execute("SELECT genome, median_ms FROM evaluations WHERE status='ok' AND problem_key=? "
                                 "AND median_ms IS NOT NULL", (key,)):
        genes = json.loads(genome)["genes"]
        if genes.get("backend") == "gluon" and (best is None or ms < best[1]):
            best = (genes, ms)
if best:
    print(json.dumps(best[0]))
    print(f"best gluon {key}: {best[1] * 1e3:.1f} us", file=sys.stderr)
