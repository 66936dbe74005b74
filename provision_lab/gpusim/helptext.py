"""nvidia-smi's and nvidia-persistenced's help texts: verbatim captures, their version the installed driver's."""

from __future__ import annotations

import base64
import zlib

from .kernel import DEFAULT_DRIVER, installed_driver

CAPTURED_DRIVER = "580.159.04"  # the driver the texts were captured from: the version they print
# zlib + base64 of tests/fixtures/real/h100-80gb-hbm3/help.txt and persistenced-help.txt, so that
# no editor can strip their trailing spaces; the version in them follows the installed driver.

SMI_HELP_Z = (
    "eNq1G2lv4zb2e34FsV92BmvZyWwL7M42BTy24hHqq7KS2W5RBLRE28ToKkk5SX/9vkdSsuQ4sjKHMcg4Evnum8z8zht7Q7J6kool"
    "ZEZTumUJSxXxUsXEhoaMOA7Z//ivy/7Vj//uX/5wcTG/W808kotszyMmSZKlXGWCp1vC000mEqp4lhL4RgImY0poGhHJYhYq8mtB"
    "I5GRiO15yGT/ItgxElFFCZcAkElAzCIAQxhXOyYIJXlM4VfFHhUBgDQl/51NicHSI3tOiVRRVpiXZMNj1rf00VhmByIl2zNBY5Ic"
    "GMxyeIKkSk1ruKPpFplQSJMmEGBTBQAv5pli8Jwq/XJTpCHuozFXTyTbEIMQWGCPeSaBAbUTWbHd6dXzOyB45KwpvLiI+VpQ8dQn"
    "K8bsWy1+wMdiJIg8sLXkgA1JSjLBGjKla2QVIfYvlk9qB48eBM1hnyQqM6go7NG80z3lMV2DRAhBOcPWHAV1oPcizRTZFlRQEDuS"
    "nZE1I2safn6gIpIkzJIcEAOI/1jYaaSpXvM0AlFJjaxaf3FYDzLbKZW/HwwqzvopaILTPiwamK/OQRmOFYyT7pN4UO7Nn3LezzWf"
    "/Uxs9e/V3tjJnwYXqyLPM4FGA6qOilDJ9xcOuSnimNhXFwQ+DhnCE2OO5cIeqlcoVPkDWJtm7BeWx2h2ItyBEkJVCFbbb633ywFM"
    "fG/8hdsn7CYTYJIBV+AEr4XhkClPOIrpuVQmbKMhvxamVYRMOPl9sQy8xfyK/D70J1d//FE+eKcfvIMH/T6YhMa56+FPZ8finBx9"
    "lhBEFCkkGEXT7MHs2CNXFoT5OA54tMTXz0GUb14EMvVWATE0rt5bwqaGsJhL5WzzQtagjrmEOPQEEQbfogtNlrfoH2kKwjCeg2KS"
    "OoqWnH6oAWSPYVxELLKQnwMsFxjIGPKa8Fa3s9nQ/+2I6J9S8HOxLdCH5M9Naa522QMgkEWSgGd1JTrM4h4QDf8VSSq/AiDykBSx"
    "4haWDdoWz+95DHKgKYL5w6LmRl48uj42DBIAk0wh8pyFfMNDRN032zZmG8b+lCasvnmabZGoahvQiMt6BAI/phcI6SkuMDnEwout"
    "2rIsv35moBkEyCJVPCYjJeJ/jAjkhANwyUAYmL8gde5prHn99dZ9pjbnT4Pjz4KBIJuf0jSAQUxqt5BctR23CK4w0ApcSk4YAb5o"
    "8gzAe0C6EnxdKEzEX6SAkr7vpIhHA+8RQr2xnYYiIFYxXQyYvNZvhIZIRc9Y+LRjKZEgD4xsANRu7BGWrIGecTC2eCODNzKKuD6l"
    "nCyNn2xNo+uVKsy8JzN3tvB/612QDp/bwJt6/xuiafSIOxr1SODOlq4/DG59t0eWi0+u3yOj6WL0SzeAo8VseRvgVm+8gp+uf7Pw"
    "Z8P5CB6tbpfLhR+443sNcNUN4nI4ce99N/B8d+bOgx4ZjkaL23ngzSdA8ny0GLv+/SoYBh3hHagAA7oPID24wT1y3SN3i2kA2Hrk"
    "5sPIgOwE0V98AgJnw+UShTVZLe9vPH/2aei793euvwLZdmMUhX2/mi0WwUfNnHmw9Bc33tQ9T8pNTKEgCsGOIURAkQM1EpiGzqDw"
    "W0IJ62/7WskacP8swBVN8hhtVRfIGlBCHwcJTwd0v8VyU5d5gkE2RlRnAWJJaU2qZng6MWqLINbiiXrKy5jQ9hlnTKZ/V+QhE58N"
    "fU6BIcF5JBsUxveJpwgxkT0L0Unk9WsgJjyGjHsC7MqduqPAu3NPBmyok7IHqbNbSGMshSBY5VRiJMaqP+YhxN4yl0MlBQWv4kxX"
    "5TrIl9E7S1ktcJsEgDXBM+F6z8r+KuO1BgCgzlZXNeCNZqLfwC3LAtoJ4yz8rDP+1PJRvSPm3Zegfwa/hRbsHyAdOdDRVJVHSUtY"
    "CAFFDoRdCs3XXrsYLkZhQysp2RdR18DYQhkNw6zA3rRGW0lZ9e7bkHSE6gRRbZ9gB3HBlBXwBfu7gxLBkvaYtXeZVE32IIZwARhz"
    "qLzlkeBtK5wwoOKJmBW6Fd5R0MKaQVK127+E2ybmFg0IlmCjGzkCHfElHylXEVz1ZfTU0RzRY1wYulaIyCCMyosNFdenEOjIL1kO"
    "PTaqoIwQtp7Jcj1/eN8hQYVyD/1aeAQPolcBcnsDKX48DKDueNsBVJrtGI0ghjlEfua5mWlwITGAQXiyKUvX7Gah7AQUq0wJMKMM"
    "k0Juejn9DMWYQo8iOATPTsm4+hgGv13P8J1L1m+Z675bqhu7d97IJbPF2LvxRqYIaKa737WQG6kqT3rIGY6awIZZGjInySItsRVI"
    "ufac4PP35HIw9lbDD1N33CNXA3euvxpYzEiJhSEE4HTDtwe+gmy7jRmWSWXgaoWUG0g4OVQaHhMiE1pOPj7TgPQzoqOqRGhQZwLT"
    "UxehDScT350MA9d2vwZemRZKDonlEkTmmmGhjfQQKyD1045eDIy4N8PbaaD5+O9oeruCguM++Oi7wzF5M3aXvgv6cMdvz9fS7wZQ"
    "mX70PngBiuWfNXDwfOSuVo1+aJslzxwEGUKPWJRzUDJDxXXyz8vBcDq9x67lalD1HO8GUyjFx0sjSmEx54VRT90zBd9uwYXMcwiH"
    "GIE6lje6vC6kmTYYAHY3+fjJDGxx8iC5KoxazsLUyewhK2LIkOjZD+A0APnPguMkFWrucIdhUbB1lqkOGfgpxzAHhQpQuSliwqFE"
    "gKBYrGMcnNZNckfPU5eFuvLpkFyNwdem2jicfT7h1dU6T8+Cw9QYUihizPx+pwVUyt7kCFogoq6UKaN1uxuzNXtUgh7mVz14AUgB"
    "Bz0PM2IbWsSK3NhhPJnioNmienMz9d/2IZhAESQLgHcW3AfILHpvDxlE610XZQOzT8y4kQvViAjoQ8BKuNPWdwevCxrzv17jS+CD"
    "Uu/eN3cjGlTWPwd3Nmn9MLhbTYZnAd6dgIM1qkaCzameXICIUUwPO3beDnD8JIko0hR7Uay0yA76Q7HnMhNlltqGJu2Fn7XDm1Jf"
    "y2ll85EkP0HnOsmLEb7rQSdbfv/ZdheEyg6Kwk9OuSBvdD999ePlZQ9/vDV+DGYBzmo6NTD6LSOdIOo6V2IlSpAWM4Y1dGFGNWdS"
    "s49/9bvNOJhS5iQJJKdtGnIZJEgWNTKG5bsTSH3yQj8zwjYbPEgTbEtFFEOXoeNLinBreupGp5figRBahZ4koONB4Ey3RUxFJQ8j"
    "BF2HdQJq9PJTqd073PgzOOMiN2dm8RMWNNowzbCkE9RDWQNegadPIQZ6W5zhuR7As8aYmMRz5KmkaYxoH5oGzObPLLeb+IA1Hmko"
    "WFZAKrSJzziDqUkOMLtFSVllM+sUdqZehjtTD1fF4cHtTH928Lym381YUvld+f2r/O7HK/A7/PGt/W5m+swvdb3vadKl4EqTtupO"
    "aupuaOE1Gq+zfVbp0UmlO7CcYalw3S1IVQaSWL6sXAA5/t83s4QYzw3xrLhTlMLgxswZcYpH9oonxpo5nmlxxTE1dSlmqlkG/KvV"
    "L2uoqtI4o3j6rGOiYOVviPMzEynTwaCIWTckvin0IHJW1R2qNDqt0krGr9FtuedIyVZYFicNddSqNxSVM9d9WYPobQXNdzyUX+XD"
    "7y7Bh//1zIVBXX+XXYNy5Z5QTEB3XNUJdT5M0XA4sBO05jEnGH6NbBt4OnhPHmsx59kDE4627esTDkEfeVIkRK+qXxmxzpCSB6pU"
    "hywRQMbWI+LMJr+q2AUaZAi1uiVLGu3rR9dtOctO43BCb1OX3oNtrT7TuxoEi2A4vYdO9XbqkjcTgTd4PmZ4R4QsoPZ7axtdgzAs"
    "Ilqv1vCz2IO16kszmW7RVIbuUUpzdDsedh4He8C5habzZK+e2XZ8i3OUDbZaLA2RQyxIKxPSmOr6PY8PGURrO8w87U2jw5WGjcgS"
    "Lcm7LFY4ShO8y5y2ChM0gnTKJTQuIBeccu3B7LddQFwOfHcVLHz3vjYFWNy5vu+N7fiBmk7DjoCB3EMV46Z4lQdVEnGpvw6rVabZ"
    "aJuThJRqdceMiqMJ8/meGzdJ3Q9qj6vG3UtvXN1UWBdQl4rmISy0h5kDTbNUjrWeaz10qDsnriF6DXgbaPoJvffAyPn2WBxY7RGG"
    "A+GwzAb6RhczHQ/dKD2zO5/wYwq0GIpCiM8pDrqlvjnSzFsN/sC7Emg1wUrPJ199lgSNeepoWxpg4sFLFEpksXaXulCSTm3k5eB2"
    "jsble6PAaP/wmy2K+VYXxfpCBk/BHXCCB9Xp9QnLmuEqcF6zCn22zbhem123SpWDIaVHtI5iiRmXliMpO7oN4DlOMwphgp3pYsHi"
    "IrYVDBTMYsmLb+G99uCfpdibRIImDkQk8aSj9nVtLjn2hzMQWPmqy4zyleKprAuTI57U1ObSpfOUjyHrywzaH1VOZDrP0doQb2uI"
    "7cNJZ8QX1Zy+THlfebuHZQ+oEz0wc8BnHqjQ2UEzgSffsA196S8mMjtWQ1Oxy6Sm6HbuBW3jbkcZ2pRWshOzGo0oc30HB/Rpxos6"
    "1/quq4efw9kH1/9WXJuDCTyM/rj4hBdSjuhsu91iLr7Z8gC3Hl+aO03ftz4Aef1VJENyz9y/sQdqEVsX21PnaZoo65o6u8O6xi2/"
    "EwT3CYAdG8HMqrvKJqhGydH9wed3fWT9MrDOdzKESK1vZpRX2s65299qdyU1Smf3t5M3fK0EIspeJMwvUk0FXrvdCkjFkVa1vYVd"
    "FTzYEJRw7Hl0x9NjXl5qgNIIS1WoWjdMB+E+mR8fKH/iaYQnpWsqoERWHY73GrIw9J2RhmD6VsrpG1TVSQCuGeiJcmiCVXUkpazq"
    "tixl5tgU2kiD+utF8ip+LSdt/C6Nrp5Zat7FUq2iv5Wp5ueUEyyWi+li8pshUWV51tGZBvaOKG6Js+1Tv4FXA2rDC2nYmxO8Iuau"
    "rCML/DOBdtwDKKZMJ4VlhNmhI7o5oTbdHo9QXE16zNI2guZ3U2/+iyEl3QOEz91iil1bh9bAbN+3oR69Gxm84buQdI1lsOllpAio"
    "FaO+PmiRVpeGTl1+MDUthidzJcUMmF5GbIC14bY3DsnKXa1MZkRMkBEyvKfAdAkuW1m3a0m1+EVyjqG20XXzYXRE02YdnqTnFE24"
    "+zw9dYhttOi/MsCbPoaQ/anrZceE7E1l/QJmDaIN5cybGGS6z3jphmX5xzi22TFuB1trI5YmXoTWaonm6JlAFPJGNgqVZ/e2nTxn"
    "keWVLVyNk4CmQTZhvUgKVhgfFotVQFZTaOZ9Q4lpDWXM0dzO+obp98zqIzIagFqJ0Nc7yUdvHrzXSUOPuXZYGT77uFLxRAc/VL0J"
    "fvpPL5q4ayDa2R+u3DIyaOapZM4L0eFXzTCixVXlNKnJcm17K97RYn4DIp8H3nBa2kNpCOmmvMnRITThRRRoAHFEXer92Bhq8Fpp"
    "Qs5qV6+h9YAGZOF788l7cyyyzZOXxy3PSNP6YULjMPdrqj+4w3K6SSWCbjeRkWcripCfyxdlfII9LwcHhNNa0WjTWiXQae4O5Yw2"
    "K1k+PCMBY52H1S/TcgT2PF0QlLBJkHWycvvsnGLwKgUeP1j6qm1nyKvWtVLnzyxJ4mVbOTgSLMczYax3j6MHAmjBtIwZOqG0f5B4"
    "2Pjm6i0G5gL8AW9nHvZHUOcD/VET0P8Byd9kvg=="
)
PERSISTENCED_HELP_Z = (
    "eNqtVk1v4zYQvedXDPayCWA72aQB2gI5uHGaGuhuDW+cHooeaGkkEaFILUnZ8b/vDEnZSqykxaIBFtlQ5Myb9+brRG9kLsW4Qeuk"
    "86gzzH8G2PCfRsP1jxeTT9c/TS5+ODkBeKgQvjzOZ/MpLA73YSawNnrCN6bgjVFQGAu1kNrTP6lL2Fv3kFtJxsF54XEErsFMFjIT"
    "Su3Cq9YhrHfgD55+l7p9Ts+Cj1vT7KwsKw+nt2dwefHpanx5cXnd3b81tjFWeBkgnQzEB3+Zhj+7v9nceDOC8TgFTH/zz8IS9gCi"
    "9VJJv9sTInQO+Cx9QDKu+GmFqnnxrnWiRJCa4qkDjhAZW8tMXbMFJTVCAvHK5GNCszYOk9Vbo701ykFltlC3WfXCtnTQsFvMJ/DL"
    "DnIsRKv8CIYC30qlwGjiOjwBtNbYiGArLEvlSEBwO6dMGfXQ+EwakXXADennRiAcbJHs0G9S0fq2CQZc1frcbDVo42WGbgJfg7g7"
    "TgBfEcxCiTJCyATrPISQvAvlTMKXTPUwUcAhdcBboZ0MDFIaMSmMq0INPXtQmxyZIdRircg8RZRLF/4/Cqh7TAoFNTrWziU3+9gO"
    "8rSw+nq3/DL9fMc6URT2pjtIai1b0nSYfF/FnKJXjLKWzoUMMMXhPFUE3U9l0JkHYcu2JgkmVIcUUrhdt85DJTYIWyuJFZERXYEv"
    "fnq+Efbctvp8CE4uLelq7G4C8yIKtD+C3BAJxD5H7t5LJuE91o1nj5lFFkZ6Fo8Tno4qocuoP9KpCeACcGa1tIb4nc/cAUGsCVaM"
    "nZdU8/od53ynD4C94bGv+SxqV8L98o/VohMvuL/ZH/1n+SLsAf3ihyMB9x56ClK8axPsHYJmSvh+TKv9qcWOh/7lEL8XTxwqEryQ"
    "7SH9c/QMTXe0dywzQ2T4e7nmgo3MylpQhuzNvpu8r2PpxX/8mZCE2v9/pO8ARu37JsbcFTgDtDk6Tlnwb400NAcXc+Ko33TNhvsn"
    "DTaytIkNcUUcfhx0+5GDoPtk4sicKYrXpnr9KYXXbuq3Qhz69B1hrh4/H2PrmumbsQ457wU7aJRtubahKc5jZyBk+JMTffDtoddT"
    "f4f7xYpmjQ6NjCZkHMKL2/n47pnKhpKEqt3LmlaYK1BmO27MtttNJrDEAm3XStNyMaX+qpC2CwIWF5N7K5pKZg5mcbFZ3k1nVOqU"
    "kA07JNRv+DtdPsyuzmARXH4WmuZOrI07xs/VOxhgLXZApkgyml0g8lym2cWx1rSIUW3GBWSNbMRi5HEU5ndsEZqGbNMoWrvSBkI9"
    "hsYEt4yUTikZsqIcN8JXN4vpw28pZ3gJPHymVWZtuR/EiRQGOG85rWbreOiaicAntBoVh9Iq5MvfWqTX3PvqwAHH4Tg0fkRDn0o8"
    "DbyeJ4vfWppVoc0M5G16kNqKp2XljZZeoQ0glDFPaUnrOTolFJlwYaSlLCok7wyeZZVUGLTunL105irTqpwYpqWCd1p+tCbCkFp0"
    "TuT+ypuxIa/UpoXkyjnaFkfQKGS3DmNHG4JOZDX8rhsaH1aua/hD11dxjf1ANrOAM3XtFzv2cCoT6H8AdQFD6A=="
)


def help_text(blob: str, config: dict | None) -> str:
    """The help of the installed programs: their version is the installed driver's."""
    text = zlib.decompress(base64.b64decode(blob)).decode()
    return text.replace(CAPTURED_DRIVER, installed_driver(config or {}) or DEFAULT_DRIVER)

# `nvidia-smi mig -h` of the 580 driver, verbatim ([H200-MODES] mig-help.txt; one line ends in a space).
MIG_HELP = (
    '\n'
    '    mig -- Multi Instance GPU management.\n'
    '\n'
    '    Usage: nvidia-smi mig [options]\n'
    '\n'
    '    Options include:\n'
    '    [-h | --help]: Display help information.\n'
    '    [-i | --id]: Enumeration index, PCI bus ID or UUID.\n'
    '                 Provide comma separated values for more than one device.\n'
    '    [-gi | --gpu-instance-id]: GPU instance ID.\n'
    '                               Provide comma separated values for more than one GPU instance.\n'
    '    [-ci | --compute-instance-id]: Compute instance ID.\n'
    '                                   Provide comma separated values for more than one compute \n'
    '                                   instance.\n'
    '    [-lgip | --list-gpu-instance-profiles]: List supported GPU instance profiles.\n'
    '                                            Option -i can be used to restrict the command to\n'
    '                                            run on a specific GPU.\n'
    '    [-lgipp | --list-gpu-instance-possible-placements]: List possible GPU instance placements\n'
    '                                                        in the following format, {Start}:Size.\n'
    '                                                        Option -i can be used to restrict the\n'
    '                                                        command to run on a specific GPU.\n'
    '    [-C | --default-compute-instance]: Create compute instance with the default profile when used\n'
    '                                       with the option to create a GPU instance (-cgi).\n'
    '    [-cgi | --create-gpu-instance]: Create GPU instances for the given profile tuples. A profile\n'
    '                                    tuple consists of a profile name or ID and an optional placement\n'
    '                                    specifier, which consists of a colon and a placement start index.\n'
    '                                    Provide comma separated values for more than one profile tuple.\n'
    '                                    Option -i can be used to restrict the command to run on\n'
    '                                    a specific GPU.\n'
    '    [-dgi | --destroy-gpu-instance]: Destroy GPU instances.\n'
    '                                     Options -i and -gi can be used individually or combined\n'
    '                                     to restrict the command to run on a specific GPU or GPU\n'
    '                                     instance.\n'
    '    [-lgi | --list-gpu-instances]: List GPU instances.\n'
    '                                   Option -i can be used to restrict the command to run on a\n'
    '                                   specific GPU.\n'
    '    [-lcip | --list-compute-instance-profiles]: List supported compute instance profiles.\n'
    '                                                Options -i and -gi can be used individually or\n'
    '                                                combined to restrict the command to run on a\n'
    '                                                specific GPU or GPU instance.\n'
    '    [-lcipp | --list-compute-instance-possible-placements]: List possible compute instance placements\n'
    '                                                            in the following format, {Start}:Size.\n'
    '                                                            Options -i and -gi can be used individually or\n'
    '                                                            combined to restrict the command to run on a\n'
    '                                                            specific GPU or GPU instance.\n'
    '    [-cci | --create-compute-instance]: Create compute instance for the given profile name or IDs.\n'
    '                                        Provide comma separated values for more than one profile.\n'
    '                                        If no profile name or ID is given, then the default*\n'
    '                                        compute instance profile ID will be used. Options -i and\n'
    '                                        -gi can be used individually or combined to restrict the\n'
    '                                        command to run on a specific GPU or GPU instance.\n'
    '    [-dci | --destroy-compute-instance]: Destroy compute instances.\n'
    '                                         Options -i, -gi and -ci can be used individually or\n'
    '                                         combined to restrict the command to run on a specific\n'
    '                                         GPU or GPU instance or compute instance.\n'
    '    [-lci | --list-compute-instances]: List compute instances.\n'
    '                                       Options -i and -gi can be used individually or combined\n'
    '                                       to restrict the command to run on a specific GPU or GPU\n'
    '                                       instance.\n'
    '\n'
    '\n'
)
