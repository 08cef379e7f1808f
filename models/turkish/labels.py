"""Morpheme labels in English and Turkish: every tag :mod:`models.turkish` can put on a morpheme.

The tags are Zemberek's morpheme ids (as zeyrek emits them; Akın & Akın 2007, Zemberek-NLP's
``TurkishMorphotactics``), plus Dikkat's own ``Unk`` (a word the analyzer does not know) and ``Num``/``Punc`` for
numbers and punctuation. Turkish names follow the Türk Dil Kurumu's grammar terms (``belirtme hâli``, ``görülen
geçmiş zaman`` ...); the suffix in parentheses is its archiphonemic form (A = a/e, I = ı/i/u/ü, D = d/t, C = c/ç).
"""

from __future__ import annotations

from .. import checks
from ..errors import InvalidArgumentError

LABELS: dict[str, dict[str, str]] = {
    # parts of speech (the stem)
    "Noun": {"en": "noun", "tr": "ad (isim)"},
    "Adj": {"en": "adjective", "tr": "sıfat"},
    "Verb": {"en": "verb", "tr": "fiil"},
    "Pron": {"en": "pronoun", "tr": "zamir"},
    "Adv": {"en": "adverb", "tr": "zarf"},
    "Conj": {"en": "conjunction", "tr": "bağlaç"},
    "Punc": {"en": "punctuation", "tr": "noktalama"},
    "Ques": {"en": "question particle (mI)", "tr": "soru eki (mI)"},
    "Postp": {"en": "postposition", "tr": "edat"},
    "Det": {"en": "determiner", "tr": "belirleyici"},
    "Num": {"en": "number", "tr": "sayı"},
    "Dup": {"en": "reduplication", "tr": "ikileme"},
    "Interj": {"en": "interjection", "tr": "ünlem"},
    "Root": {"en": "root", "tr": "kök"},
    "Unk": {"en": "unknown to the analyzer", "tr": "çözümleyicinin tanımadığı"},
    # person and number
    "A1sg": {"en": "1st person singular (I)", "tr": "1. tekil kişi (ben)"},
    "A2sg": {"en": "2nd person singular (you)", "tr": "2. tekil kişi (sen)"},
    "A3sg": {"en": "3rd person singular (he/she/it)", "tr": "3. tekil kişi (o)"},
    "A1pl": {"en": "1st person plural (we)", "tr": "1. çoğul kişi (biz)"},
    "A2pl": {"en": "2nd person plural (you)", "tr": "2. çoğul kişi (siz)"},
    "A3pl": {"en": "plural, 3rd person plural (-lAr)", "tr": "çokluk eki, 3. çoğul kişi (-lAr)"},
    # possessive
    "Pnon": {"en": "no possessive", "tr": "iyeliksiz"},
    "P1sg": {"en": "possessive: my (-Im)", "tr": "1. tekil kişi iyelik eki: benim (-Im)"},
    "P2sg": {"en": "possessive: your (-In)", "tr": "2. tekil kişi iyelik eki: senin (-In)"},
    "P3sg": {"en": "possessive: his/her/its (-(s)I)", "tr": "3. tekil kişi iyelik eki: onun (-(s)I)"},
    "P1pl": {"en": "possessive: our (-ImIz)", "tr": "1. çoğul kişi iyelik eki: bizim (-ImIz)"},
    "P2pl": {"en": "possessive: your, plural (-InIz)", "tr": "2. çoğul kişi iyelik eki: sizin (-InIz)"},
    "P3pl": {"en": "possessive: their (-lArI)", "tr": "3. çoğul kişi iyelik eki: onların (-lArI)"},
    # case
    "Nom": {"en": "nominative", "tr": "yalın hâl"},
    "Dat": {"en": "dative: to (-(y)A)", "tr": "yönelme hâli (-(y)A)"},
    "Acc": {"en": "accusative: definite object (-(y)I)", "tr": "belirtme hâli (-(y)I)"},
    "Abl": {"en": "ablative: from (-DAn)", "tr": "ayrılma hâli (-DAn)"},
    "Loc": {"en": "locative: at, in (-DA)", "tr": "bulunma hâli (-DA)"},
    "Ins": {"en": "instrumental: with (-(y)lA)", "tr": "vasıta hâli (-(y)lA)"},
    "Gen": {"en": "genitive: of (-(n)In)", "tr": "ilgi hâli (-(n)In)"},
    "Equ": {"en": "equative: as, like (-CA)", "tr": "eşitlik hâli (-CA)"},
    # derivation
    "Dim": {"en": "diminutive (-CIk)", "tr": "küçültme eki (-CIk)"},
    "Ness": {"en": "-ness, abstract noun (-lIk)", "tr": "-lIk yapım eki (soyut ad)"},
    "With": {"en": "with, having (-lI)", "tr": "-lI yapım eki (sahiplik)"},
    "Without": {"en": "without (-sIz)", "tr": "-sIz yapım eki (yokluk)"},
    "Related": {"en": "related to (-sAl)", "tr": "-sAl yapım eki (ilgi)"},
    "JustLike": {"en": "-ish, just like (-ImsI)", "tr": "-ImsI yapım eki (benzerlik)"},
    "Rel": {"en": "relative: the one at (-ki)", "tr": "ilgi eki -ki"},
    "Agt": {"en": "agent, maker (-CI)", "tr": "-CI yapım eki (meslek, uğraş)"},
    "Become": {"en": "become (-lAş)", "tr": "-lAş yapım eki (olma)"},
    "Acquire": {"en": "acquire (-lAn)", "tr": "-lAn yapım eki (edinme)"},
    "Ly": {"en": "-ly, in the manner of (-CA)", "tr": "-CA yapım eki (tarz)"},
    "Caus": {"en": "causative (-DIr, -t)", "tr": "ettirgen çatı (-DIr, -t)"},
    "Recip": {"en": "reciprocal (-Iş)", "tr": "işteş çatı (-Iş)"},
    "Reflex": {"en": "reflexive (-In)", "tr": "dönüşlü çatı (-In)"},
    "Able": {"en": "ability: can (-(y)Abil)", "tr": "yeterlik (-(y)Abil)"},
    "Pass": {"en": "passive (-Il, -In)", "tr": "edilgen çatı (-Il, -In)"},
    "Inf1": {"en": "infinitive (-mAk)", "tr": "mastar (-mAk)"},
    "Inf2": {"en": "verbal noun (-mA)", "tr": "ad-fiil (-mA)"},
    "Inf3": {"en": "verbal noun (-(y)Iş)", "tr": "ad-fiil (-(y)Iş)"},
    "ActOf": {"en": "act of (-mAcA)", "tr": "oyun adı (-mAcA)"},
    "PastPart": {"en": "past participle (-DIk)", "tr": "sıfat-fiil (-DIk)"},
    "NarrPart": {"en": "evidential participle (-mIş)", "tr": "sıfat-fiil (-mIş)"},
    "FutPart": {"en": "future participle (-(y)AcAk)", "tr": "sıfat-fiil (-(y)AcAk)"},
    "PresPart": {"en": "present participle (-(y)An)", "tr": "sıfat-fiil (-(y)An)"},
    "AorPart": {"en": "aorist participle (-Ir, -mAz)", "tr": "sıfat-fiil (-Ir, -mAz)"},
    "NotState": {"en": "state of not doing (-mAzlIk)", "tr": "yapmama durumu (-mAzlIk)"},
    "FeelLike": {"en": "feel like doing (-(y)AsI)", "tr": "isteklilik (-(y)AsI)"},
    "EverSince": {"en": "ever since (-(y)Agel)", "tr": "süreklilik (-(y)Agel)"},
    "Repeat": {"en": "keep doing (-(y)Adur)", "tr": "süreklilik (-(y)Adur)"},
    "Almost": {"en": "almost (-(y)Ayaz)", "tr": "yaklaşma (-(y)Ayaz)"},
    "Hastily": {"en": "hastily (-(y)Iver)", "tr": "tezlik (-(y)Iver)"},
    "Stay": {"en": "stay doing (-(y)Akal)", "tr": "süreklilik (-(y)Akal)"},
    "Start": {"en": "start doing (-(y)Akoy)", "tr": "başlama (-(y)Akoy)"},
    "AsIf": {"en": "as if (-(y)CAsInA)", "tr": "gibi (-(y)CAsInA)"},
    "While": {"en": "while (-(y)ken)", "tr": "iken (-(y)ken)"},
    "When": {"en": "when (-(y)IncA)", "tr": "-(y)IncA zarf-fiili"},
    "SinceDoingSo": {"en": "since (-(y)AlI)", "tr": "-(y)AlI zarf-fiili"},
    "AsLongAs": {"en": "as long as (-DIkçA)", "tr": "-DIkçA zarf-fiili"},
    "ByDoingSo": {"en": "by doing (-(y)ArAk)", "tr": "-(y)ArAk zarf-fiili"},
    "Adamantly": {"en": "adamantly (-(y)AsIyA)", "tr": "-(y)AsIyA zarf-fiili"},
    "AfterDoingSo": {"en": "and then, after doing (-(y)Ip)", "tr": "-(y)Ip zarf-fiili"},
    "WithoutHavingDoneSo": {"en": "without doing (-mAdAn)", "tr": "-mAdAn zarf-fiili"},
    "WithoutBeingAbleToHaveDoneSo": {"en": "without being able to (-(y)AmAdAn)", "tr": "-(y)AmAdAn zarf-fiili"},
    "Zero": {"en": "change of part of speech without a suffix", "tr": "eksiz tür değişimi"},
    # verbs: polarity, tense, aspect, mood
    "Cop": {"en": "copula (-DIr)", "tr": "ek-fiil (-DIr)"},
    "Neg": {"en": "negative (-mA)", "tr": "olumsuzluk eki (-mA)"},
    "Unable": {"en": "cannot (-(y)AmA)", "tr": "yetersizlik (-(y)AmA)"},
    "Pres": {"en": "present (copula)", "tr": "şimdiki zaman (ek-fiil)"},
    "Past": {"en": "past tense (-DI)", "tr": "görülen geçmiş zaman (-DI)"},
    "Narr": {"en": "evidential past (-mIş)", "tr": "öğrenilen geçmiş zaman (-mIş)"},
    "Cond": {"en": "conditional (-sA)", "tr": "şart (-sA)"},
    "Prog1": {"en": "progressive (-Iyor)", "tr": "şimdiki zaman (-Iyor)"},
    "Prog2": {"en": "progressive (-mAktA)", "tr": "şimdiki zaman (-mAktA)"},
    "Aor": {"en": "aorist, habitual (-Ir, -Ar)", "tr": "geniş zaman (-Ir, -Ar)"},
    "Fut": {"en": "future tense (-(y)AcAk)", "tr": "gelecek zaman (-(y)AcAk)"},
    "Imp": {"en": "imperative", "tr": "emir kipi"},
    "Opt": {"en": "optative: let (-(y)A)", "tr": "istek kipi (-(y)A)"},
    "Desr": {"en": "wish: if only (-sA)", "tr": "dilek-şart kipi (-sA)"},
    "Neces": {"en": "necessity: must (-mAlI)", "tr": "gereklilik kipi (-mAlI)"},
}

KIND_NAMES: dict[str, dict[str, str]] = {
    "stem": {"en": "stem", "tr": "gövde"},
    "suffix": {"en": "suffix", "tr": "ek"},
    "unknown": {"en": "unknown word", "tr": "bilinmeyen sözcük"},
    "punct": {"en": "punctuation", "tr": "noktalama"},
}


def label_name(label: str, lang: str = "en") -> str:
    """The name of a morpheme label (``Acc`` -> ``accusative: definite object (-(y)I)`` / ``belirtme hâli
    (-(y)I)``); the label itself when the table lacks it.

    Raises:
        InvalidArgumentError: ``lang`` is neither ``en`` nor ``tr`` (code ``arg_choice``), or ``label`` is not a
            string (code ``arg_text``).
    """
    checks.choice("lang", lang, ("en", "tr"))
    if not isinstance(label, str):
        raise InvalidArgumentError(f"The label must be a string, got {type(label).__name__}.", code="arg_text",
                                   name="label", value=type(label).__name__)
    entry = LABELS.get(label)
    return entry[lang] if entry else label
