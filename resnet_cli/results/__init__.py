"""A study's results, computed once and rendered by code that computes nothing: evidence (the
statistics), records (what a table is made of), study (StudyResult: every statistic of one table),
table (the terminal table and the JSON lines)."""
