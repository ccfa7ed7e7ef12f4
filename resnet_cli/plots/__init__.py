"""The figures: study_bars (a study table as bars beside the paper's figures), degrade (He 2016a
Fig. 6 from a grid's summaries), curves (a run's training curves), gates (mean gate per unit). Each
draws results computed elsewhere."""
