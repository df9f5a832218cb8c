from django.http import HttpResponse


def index(request, **kwargs):
    return HttpResponse("billing")
