"""The report's core sections, a module each: the head, the verdicts, the F1 tables, the marginal
effects and interactions, cost, what is missing, the plots, what the report leaves out and the
diverged folds (klue_tc/report/contents.py orders them with the further analyses)."""
